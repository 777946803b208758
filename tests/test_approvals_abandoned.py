"""A held hook request whose caller went away is abandoned at once, and says so.

Through a real `serve` (both stores), and two replicas on PostgreSQL: a Claude Code
PreToolUse held by an approval rule; the client stops waiting (its read times out and
it closes the connection, as the hook client does at its own timeout). The approval
becomes `abandoned` without anyone deciding; a decision afterwards is 409 naming why, on
either replica. The call then runs (its PostToolUse arrives): the timeline and the
activity say it ran while awaiting approval, never that it was denied; a replay finds
no drift.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from infra.settings import Settings
from tests.support import Server, admin_client, env_for
from tests.test_approvals_api import issue, pre_tool_use

pytestmark = pytest.mark.slow

ADMIN_KEY = "abandoned-admin-key"
ADMIN = {"x-tachograph-key": ADMIN_KEY}
RULES = {"version": 1, "rules": [{"id": "risky", "tool": "Bash", "match": "^rm ", "timeoutS": 60}]}
ENV = {"TACHOGRAPH_APPROVALS": json.dumps(RULES)}


@pytest.fixture
def serve(settings: Settings, tmp_path: Path) -> Iterator[httpx.Client]:
    with admin_client(settings, tmp_path / "serve.log", ENV, ADMIN_KEY) as client:
        yield client


def post_tool_use(session: str, command: str, tool_use_id: str) -> dict[str, Any]:
    """Claude Code's PostToolUse of the same call: it ran, 85 bytes out."""
    return {
        **pre_tool_use(session, command, tool_use_id),
        "hook_event_name": "PostToolUse",
        "tool_response": {"stdout": "x" * 85, "stderr": "", "interrupted": False},
        "duration_ms": 26,
    }


def give_up(client: httpx.Client, agent: dict[str, str], body: dict[str, Any]) -> None:
    """Send a hook and stop waiting after a second, closing the connection."""
    with pytest.raises(httpx.ReadTimeout):
        client.post("/hooks/claude", json=body, headers=agent, timeout=httpx.Timeout(5, read=1))


def listed(client: httpx.Client, command: str, status: str, seconds: float = 20) -> dict[str, Any]:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        items = client.get("/api/approvals", params={"status": status}).json()["items"]
        found = [item for item in items if item["inputSummary"] == command]
        if found:
            return dict(found[0])
        time.sleep(0.05)
    raise AssertionError(f"no {status} approval of {command!r}")


def call_of(client: httpx.Client, session_uuid: str, tool_use_id: str) -> dict[str, Any]:
    turns = client.get(f"/api/sessions/{session_uuid}/timeline").json()["items"]
    calls = [c for turn in turns for c in turn["calls"] if c["toolCallId"] == tool_use_id]
    assert len(calls) == 1, turns
    return dict(calls[0])


def activity_of(client: httpx.Client, tool_use_id: str) -> dict[str, Any]:
    rows = client.get("/api/activity", params={"limit": 200}).json()["items"]
    found = [row for row in rows if row["toolCallId"] == tool_use_id]
    assert len(found) == 1, rows
    return dict(found[0])


def replay(settings: Settings) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cli.main", "replay"],
        env=env_for(settings.with_(api_key=ADMIN_KEY)),
        capture_output=True,
        text=True,
        timeout=300,
        cwd=Path(__file__).resolve().parents[1],
    )


def test_a_caller_that_stops_waiting_abandons_its_approval_and_the_call_ran_undecided(
    serve: httpx.Client, settings: Settings
) -> None:
    agent = issue(serve, role="agent", workspaceId="default")
    native, tool_use_id, command = str(uuid.uuid4()), "toolu_abandoned_1", "rm -rf build"
    give_up(serve, agent, pre_tool_use(native, command, tool_use_id))

    abandoned = listed(serve, command, "abandoned")
    assert abandoned["decision"] is None
    assert abandoned["settledAt"] is not None

    late = serve.post(f"/api/approvals/{abandoned['id']}/decide", json={"decision": "deny"})
    assert late.status_code == 409, late.text
    assert late.json()["error"] == "invalid_state"
    assert "abandoned" in late.json()["message"]
    assert "stopped waiting" in late.json()["message"]
    assert serve.get(f"/api/approvals/{abandoned['id']}").json()["status"] == "abandoned"

    # The runtime went on without a decision and ran the call.
    ran = serve.post(
        "/hooks/claude", json=post_tool_use(native, command, tool_use_id), headers=agent
    )
    assert ran.status_code == 200, ran.text
    position = ran.headers["x-tachograph-position"]
    serve.get("/api/activity", params={"minPosition": position})  # read models caught up

    call = call_of(serve, abandoned["sessionId"], tool_use_id)
    assert call["status"] == "ran_undecided"
    assert call["decision"] == "ask"
    assert call["handlerId"] == "approval:abandoned"
    assert call["bytes"] is not None
    row = activity_of(serve, tool_use_id)
    assert row["status"] == "ran_undecided"
    assert row["decision"] != "deny"

    replayed = replay(settings)
    assert replayed.returncode == 0, replayed.stdout + replayed.stderr
    assert "DRIFT" not in replayed.stdout


def test_a_decision_that_comes_first_stands_and_nothing_is_abandoned(
    serve: httpx.Client,
) -> None:
    agent = issue(serve, role="agent", workspaceId="default")
    native, command = str(uuid.uuid4()), "rm -rf dist"
    answered: list[httpx.Response] = []

    def send() -> None:
        answered.append(
            serve.post(
                "/hooks/claude", json=pre_tool_use(native, command), headers=agent, timeout=90
            )
        )

    thread = threading.Thread(target=send, daemon=True)
    thread.start()
    request = listed(serve, command, "pending")
    decided = serve.post(f"/api/approvals/{request['id']}/decide", json={"decision": "allow"})
    assert decided.status_code == 200, decided.text
    thread.join(30)
    assert answered and answered[0].status_code == 200
    assert serve.get(f"/api/approvals/{request['id']}").json()["status"] == "decided"


@pytest.mark.parametrize("store_kind", ["postgres"], indirect=True)
def test_an_abandoned_request_is_refused_on_every_replica(
    settings: Settings, tmp_path: Path
) -> None:
    shared = settings.with_(api_key=ADMIN_KEY)
    servers = [Server(shared, tmp_path / f"serve-{n}.log", ENV) for n in "ab"]
    try:
        for server in servers:
            server.wait_ready(timeout=60, headers=ADMIN)
        a, b = (httpx.Client(base_url=s.url, headers=ADMIN, timeout=30) for s in servers)
        with a, b:
            agent = issue(a, role="agent", workspaceId="default")
            command = "rm -rf cache"
            give_up(a, agent, pre_tool_use(str(uuid.uuid4()), command))
            on_b = listed(b, command, "abandoned")
            late = b.post(f"/api/approvals/{on_b['id']}/decide", json={"decision": "allow"})
            assert late.status_code == 409, late.text
            assert "abandoned" in late.json()["message"]
            assert a.get(f"/api/approvals/{on_b['id']}").json()["status"] == "abandoned"
    finally:
        for server in servers:
            server.kill()
