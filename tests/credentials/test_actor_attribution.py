"""Every command event names the credential that caused it (both stores)."""

from __future__ import annotations

import re
from collections import defaultdict
from typing import Any

from fastapi.testclient import TestClient

from tests.credentials.conftest import ADMIN_HEADERS, Keys, log_head

ACTOR = re.compile(r"^(key:[a-z0-9._-]+|agent:[0-9a-f-]{36}|task:[0-9a-f-]{36}|system|coder)$")


def ok(response: Any, *statuses: int) -> dict[str, Any]:
    assert response.status_code in (statuses or (200, 201, 204)), response.text
    return response.json() if response.content else {}


def actors_by_type(client: TestClient) -> dict[str, set[str]]:
    events = client.get("/api/events?limit=500", headers=ADMIN_HEADERS).json()["events"]
    assert len(events) < 500
    found: dict[str, set[str]] = defaultdict(set)
    for event in events:
        if "actor" in event["data"]:
            found[event["type"]].add(event["data"]["actor"])
    return found


def test_every_command_event_names_its_credential(secured: TestClient, keys: Keys) -> None:
    otto = keys.headers("operator")
    ada = keys.headers("issued-admin")
    agent = keys.headers("agent")
    c = secured

    # Administration, by an issued admin key.
    services = c.app.state.services  # type: ignore[attr-defined]
    (services.settings.workspace_root / "lab").mkdir()
    ok(c.post("/api/workspaces", json={"id": "lab", "path": "lab"}, headers=ada))
    ok(c.patch("/api/workspaces/lab", json={"selfUpdate": True}, headers=ada))
    ok(c.patch("/api/settings/autonomy", json={"evolution": True}, headers=ada))
    ok(c.post("/api/keys", json={"label": "tmp", "role": "reader"}, headers=ada))
    ok(c.post("/api/keys/tmp/revoke", headers=ada))

    # The agent's own reports.
    ok(c.post(f"/api/sessions/{keys.session}/events", json={"event": "Stop"}, headers=agent))
    signal = {"agentId": "claude", "traceId": "t1", "kind": "failure", "goal": "build"}
    ok(c.post("/api/autonomy/signals", json={**signal, "failure": "flaky"}, headers=agent))
    ok(c.post("/api/autonomy/signals", json={**signal, "traceId": "t2"}, headers=agent))

    # Operations.
    session = ok(c.post("/api/sessions", json={"workspaceId": "lab"}, headers=otto))
    sid = session["id"]
    ok(c.patch(f"/api/sessions/{sid}", json={"title": "renamed", "archived": True}, headers=otto))
    ok(c.patch(f"/api/sessions/{sid}", json={"archived": False}, headers=otto))
    ok(c.put(f"/api/sessions/{sid}", json={"revision": 0, "messages": ["hi"]}, headers=otto))
    ok(c.delete(f"/api/sessions/{sid}", headers=otto))
    task = ok(c.post("/api/tasks", json={"workspaceId": "lab", "prompt": "do"}, headers=otto))
    ok(c.post(f"/api/tasks/{task['id']}/cancel", headers=otto))
    ok(c.post(f"/api/tasks/{task['id']}/resolve", json={"summary": "done"}, headers=otto))
    ok(c.delete(f"/api/tasks/{task['id']}", headers=otto))
    body = {"workspaceId": "lab", "name": "nightly", "cron": "0 3 * * *", "prompt": "p"}
    schedule = ok(c.post("/api/schedules", json=body, headers=otto))
    ok(c.patch(f"/api/schedules/{schedule['id']}", json={"name": "n2"}, headers=otto))
    ok(c.patch(f"/api/schedules/{schedule['id']}", json={"paused": True}, headers=otto))
    ok(c.patch(f"/api/schedules/{schedule['id']}", json={"paused": False}, headers=otto))
    ok(c.delete(f"/api/schedules/{schedule['id']}", headers=otto))
    pending = ok(c.get("/api/autonomy/signals?status=pending", headers=otto))["items"]
    ignored = next(s for s in pending if s["traceId"] == "t2")
    ok(c.post(f"/api/autonomy/signals/{ignored['id']}/ignore", headers=otto))
    services.autonomy.reflect()
    head = log_head(c)
    revisions = ok(c.get(f"/api/autonomy/revisions?minPosition={head}", headers=otto))["items"]
    ok(c.post(f"/api/autonomy/revisions/{revisions[0]['id']}/revert", headers=otto))
    target = "/api/autonomy/targets/overlay/claude/style"
    ok(c.put(target, json={"content": "be brief"}, headers=otto))
    ok(c.post(f"{target}/hand-back", headers=otto))
    ok(c.post("/api/autonomy/reconcile", headers=otto))

    found = actors_by_type(c)
    everyone = set().union(*found.values())
    assert all(ACTOR.match(actor) for actor in everyone), everyone
    assert "api-key" not in everyone and "anonymous" not in everyone
    expected = {
        "key:ada": [
            "Workspace.Created",
            "Workspace.SelfUpdateChanged",
            "AutonomySettings.Changed",
            "ApiKey.Issued",
            "ApiKey.Revoked",
        ],
        f"agent:{keys.session}": ["HookDispatch.Created", "Signal.Created"],
        "key:otto": [
            "Session.Created",
            "Session.Renamed",
            "Session.Archived",
            "Session.Restored",
            "Session.MessagesSaved",
            "Session.Deleted",
            "HookDispatch.Created",  # SessionStart and SessionEnd of its session
            "Task.Created",
            "Task.Cancelled",
            "Task.Resolved",
            "Task.Deleted",
            "Schedule.Created",
            "Schedule.Updated",
            "Schedule.Paused",
            "Schedule.Resumed",
            "Schedule.Deleted",
            "Signal.Ignored",
            "LearnedTarget.Revised",
            "LearnedTarget.UserEdited",
            "LearnedTarget.HandedBack",
        ],
        "key:admin": ["Session.Created", "ApiKey.Issued"],  # the fixture's own setup
    }
    for actor, types in expected.items():
        for event_type in types:
            assert actor in found[event_type], (event_type, actor, found[event_type])
