"""Helpers for audit-integrity tests: a quick bulk history and a key for signing checkpoints."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from fastapi.testclient import TestClient

from bootstrap import Services, build_services, open_read_store
from domain.application import Tachograph
from domain.session import Session
from infra.settings import Settings
from projections.store import ReadStore
from tests.autonomy.workload import autonomy_workload

KEY = "audit-test-signing-key-0123456789abcdef"


def bulk_history(app: Tachograph, sessions: int, per_save: int = 250) -> int:
    """Two events per session (created, renamed), many aggregates per transaction; the head."""
    for start in range(0, sessions, per_save):
        batch = [
            Session(
                workspace="default",
                title=f"s{i}",
                agent=None,
                agent_session_id=None,
                actor="auditor",
            )
            for i in range(start, min(start + per_save, sessions))
        ]
        for session in batch:
            session.rename(f"renamed {session.title}", "auditor")
        app.record(*batch)
    return int(app.recorder.max_notification_id() or 0)


@contextmanager
def audited_services(settings: Settings, sessions: int = 1250) -> Iterator[Services]:
    """Services with a signing key, a bulk history, and the read models caught up."""
    services = build_services(settings.with_(log_signing_key=KEY))
    try:
        bulk_history(services.app, sessions)
        services.runner.catch_up()
        yield services
    finally:
        services.stop()


@contextmanager
def read_store(settings: Settings) -> Iterator[ReadStore]:
    """A separate read-store connection (for checks after a process stopped)."""
    store = open_read_store(settings)
    try:
        yield store
    finally:
        store.close()


def mixed_workload(client: TestClient, settings: Settings, sessions: int = 12) -> None:
    """Workspaces, sessions, hook lifecycle events, tasks and schedules, through the API."""
    (settings.workspace_root / "repo").mkdir()
    assert client.post("/api/workspaces", json={"id": "repo", "path": "repo"}).status_code == 201
    assert client.patch("/api/workspaces/repo", json={"selfUpdate": True}).status_code == 200
    for i in range(sessions):
        workspace = "repo" if i % 2 else "default"
        sid = client.post("/api/sessions", json={"workspaceId": workspace}).json()["id"]
        events: list[dict[str, Any]] = [
            {"event": "SessionStart", "agent": "claude-code", "agentSessionId": f"a{i}"},
            {"event": "UserPromptSubmit", "turnId": "t1", "prompt": f"fix bug {i}"},
            {"event": "PreToolUse", "turnId": "t1", "toolName": "Bash", "toolInput": {"c": i}},
            {"event": "PostToolUse", "turnId": "t1", "toolName": "Bash", "toolResponse": "ok"},
            {"event": "Stop", "turnId": "t1"},
        ]
        for n, body in enumerate(events):
            sent = client.post(f"/api/sessions/{sid}/events", json={**body, "eventId": f"{i}-{n}"})
            assert sent.status_code == 200, sent.text
        client.put(f"/api/sessions/{sid}", json={"revision": 0, "messages": [f"m{i}"]})
        if i % 3 == 0:
            client.patch(f"/api/sessions/{sid}", json={"title": f"title {i}", "archived": True})
        if i % 4 == 0:
            client.patch(f"/api/sessions/{sid}", json={"archived": False})
        if i % 5 == 0:
            assert client.delete(f"/api/sessions/{sid}").status_code == 204
    for i in range(sessions // 2):
        task = client.post("/api/tasks", json={"workspaceId": "repo", "prompt": f"task {i}"})
        assert task.status_code == 201, task.text
        if i % 2:
            task_id = task.json()["id"]
            assert client.post(f"/api/tasks/{task_id}/cancel").status_code == 200
            done = client.post(f"/api/tasks/{task_id}/resolve", json={"summary": "by hand"})
            assert done.status_code == 200, done.text
            if i % 3 == 1:
                assert client.delete(f"/api/tasks/{task_id}").status_code == 204
    for i in range(3):
        body = {
            "workspaceId": "default",
            "name": f"nightly {i}",
            "cron": "0 3 * * *",
            "prompt": f"tidy up {i}",
        }
        schedule = client.post("/api/schedules", json=body)
        assert schedule.status_code == 201, schedule.text
        schedule_id = schedule.json()["id"]
        assert (
            client.patch(f"/api/schedules/{schedule_id}", json={"paused": True}).status_code == 200
        )
        if i == 2:
            assert client.delete(f"/api/schedules/{schedule_id}").status_code == 204
    autonomy_workload(client)
