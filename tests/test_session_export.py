"""GET /api/sessions/{id}/export and `tachograph export --session`: every event of the
session, each checkable against the hash chain from the export alone (both stores)."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient

from domain.log_chain import chain_link
from infra.settings import Settings
from tests.support import env_for

ROOT = Path(__file__).resolve().parents[1]
KEY = "ghp_" + "Z9y8X7w6V5u4T3s2R1q0" * 2


def post_events(client: TestClient, session_id: str) -> str:
    position = ""
    for body in (
        {"event": "UserPromptSubmit", "turnId": "t", "prompt": "deploy it"},
        {
            "event": "PreToolUse",
            "turnId": "t",
            "toolName": "Bash",
            "toolCallId": "c1",
            "toolInput": {"command": f"GITHUB_TOKEN={KEY} git push --force"},
        },
        {"event": "Stop", "turnId": "t", "lastAssistantMessage": "pushed"},
    ):
        response = client.post(f"/api/sessions/{session_id}/events", json=body)
        assert response.status_code == 200, response.text
        position = response.headers["x-tachograph-position"]
    return position


def stored_bytes(record: dict[str, Any]) -> bytes:
    stored = record["stored"]
    if stored["encoding"] == "utf-8":
        return str(stored["data"]).encode()
    return base64.b64decode(stored["data"])


def recomputed_link(record: dict[str, Any]) -> str:
    """The chain link of an export line, from the line alone."""
    return chain_link(
        record["previousLink"],
        record["position"],
        record["aggregateId"],
        record["version"],
        record["type"],
        stored_bytes(record),
    )


def lines(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines()]


def test_a_session_exports_every_event_with_its_checkable_link(
    client: TestClient, settings: Settings
) -> None:
    session_id = client.post("/api/sessions", json={"workspaceId": "default"}).json()["id"]
    other = client.post("/api/sessions", json={"workspaceId": "default"}).json()["id"]
    post_events(client, other)
    post_events(client, session_id)
    client.patch(f"/api/sessions/{session_id}", json={"title": "Deploy"})
    response = client.get(f"/api/sessions/{session_id}/export")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("application/x-ndjson")
    records = lines(response.text)
    types = [r["type"] for r in records]
    assert types.count("HookDispatch.Created") == 4  # SessionStart and the three events
    assert {t for t in types if not t.startswith("HookDispatch")} >= {"Session.Created"}
    assert all(
        r["aggregateId"] == session_id or r["data"]["session_id"] == session_id for r in records
    )
    positions = [r["position"] for r in records]
    assert positions == sorted(positions)
    for record in records:
        payload = stored_bytes(record)
        assert json.loads(payload)  # the payload exactly as the log stores it
        assert record["link"] == recomputed_link(record), record
    assert KEY not in response.text and "[redacted]" in response.text
    shown = client.get(f"/api/sessions/{session_id}/timeline").json()["items"][0]["calls"]
    assert shown[0]["summary"] == "GITHUB_TOKEN=[redacted] git push --force"

    done = subprocess.run(
        [sys.executable, "-m", "cli.main", "export", "--session", session_id],
        env=env_for(settings),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert lines(done.stdout) == records
    assert f"exported {len(records)} events of session {session_id}" in done.stderr


def test_a_session_without_events_is_404(client: TestClient) -> None:
    response = client.get(f"/api/sessions/{uuid.uuid4()}/export")
    assert response.status_code == 404
    assert response.json()["error"] == "not_found"
