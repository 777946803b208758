"""Auditor routes and export: streams, time travel, the ordered log."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path

from fastapi.testclient import TestClient

from infra.settings import Settings
from tests.support import env_for


def make_session(client: TestClient) -> str:
    session_id = client.post("/api/sessions", json={"workspaceId": "default"}).json()["id"]
    client.patch(f"/api/sessions/{session_id}", json={"title": "first"})
    client.put(f"/api/sessions/{session_id}", json={"revision": 0, "messages": ["m"]})
    client.patch(f"/api/sessions/{session_id}", json={"title": "second"})
    return str(session_id)


def test_stream_lists_events_with_positions(client: TestClient) -> None:
    session_id = make_session(client)
    body = client.get(f"/api/streams/{session_id}").json()
    assert body["aggregateId"] == session_id
    assert body["type"] == "Session"
    types = [e["type"] for e in body["events"]]
    assert types == [
        "Session.Created",
        "Session.Renamed",
        "Session.MessagesSaved",
        "Session.Renamed",
    ]
    assert [e["version"] for e in body["events"]] == [1, 2, 3, 4]
    positions = [e["position"] for e in body["events"]]
    assert positions == sorted(positions)
    assert body["events"][1]["data"] == {"title": "first", "actor": "anonymous"}
    assert body["events"][0]["at"].endswith(("Z", "+00:00"))


def test_time_travel_returns_state_at_each_version(client: TestClient) -> None:
    session_id = make_session(client)
    at2 = client.get(f"/api/streams/{session_id}/state", params={"version": 2}).json()
    assert at2["version"] == 2
    assert at2["state"]["title"] == "first"
    assert at2["state"]["messages"] == []
    latest = client.get(f"/api/streams/{session_id}/state").json()
    assert latest["state"]["title"] == "second" and latest["state"]["revision"] == 1
    assert client.get(f"/api/streams/{session_id}/state", params={"version": 9}).status_code == 404
    assert client.get(f"/api/streams/{session_id}/state", params={"version": 0}).status_code == 422
    assert client.get(f"/api/streams/{uuid.uuid4()}").status_code == 404


def test_events_pages_through_the_log_in_order(client: TestClient) -> None:
    make_session(client)
    make_session(client)
    first = client.get("/api/events", params={"limit": 3}).json()
    assert len(first["events"]) == 3 and first["next"] == first["events"][-1]["position"]
    rest = client.get("/api/events", params={"after": first["next"]}).json()
    assert rest["next"] is None
    everything = first["events"] + rest["events"]
    positions = [e["position"] for e in everything]
    assert positions == sorted(positions) and len(set(positions)) == len(positions) == 11
    renamed = client.get("/api/events", params={"type": "Session.Renamed"}).json()["events"]
    assert len(renamed) == 4 and {e["type"] for e in renamed} == {"Session.Renamed"}


def test_events_as_ndjson(client: TestClient) -> None:
    make_session(client)
    response = client.get("/api/events", headers={"accept": "application/x-ndjson"})
    assert response.headers["content-type"].startswith("application/x-ndjson")
    lines = [json.loads(line) for line in response.text.splitlines()]
    assert [e["type"] for e in lines][0] == "Workspace.Created"
    assert len(lines) == 6  # workspace, session, its SessionStart dispatch, three changes


def test_export_writes_the_log_as_ndjson(
    client: TestClient, settings: Settings, tmp_path: Path
) -> None:
    make_session(client)
    out = tmp_path / "log.ndjson"
    result = subprocess.run(
        [sys.executable, "-m", "cli.main", "export", "--out", str(out), "--after", "1"],
        env=env_for(settings),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert [e["type"] for e in lines] == [
        "Session.Created",
        "HookDispatch.Created",
        "Session.Renamed",
        "Session.MessagesSaved",
        "Session.Renamed",
    ]
    assert "exported 5 events" in result.stderr
