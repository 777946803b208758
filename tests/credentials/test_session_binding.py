"""A workspace-bound agent token writes only into Sessions of its workspace (both stores).

Naming as its session a task's, a dispatch's or a workspace's id, or a session of
another workspace, is 403 naming what is wrong on every route that takes a session (the
events route, Claude Code's, and the other runtimes' with x-tachograph-session-id), and
records nothing: not the first time, nor once the id is known to the process. The
signals route checks the session a signal names the same way.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from domain.ids import workspace_id
from infra.settings import Settings
from tests.credentials.conftest import ADMIN_HEADERS, BOOTSTRAP, issue, log_head

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def fixture(relative: str) -> dict[str, Any]:
    payload: dict[str, Any] = json.loads((FIXTURES / relative).read_text())
    return payload


# Every route that writes into the session a request names: (path, body).
ROUTES: dict[str, tuple[str, dict[str, Any]]] = {
    "events": ("/api/sessions/{id}/events", {"event": "PreToolUse", "toolName": "Bash"}),
    "claude": (
        "/hooks/claude",
        {"session_id": "native", "hook_event_name": "PreToolUse", "tool_name": "Bash"},
    ),
    "codex": ("/hooks/codex", fixture("codex/basic/03-PreToolUse.json")),
    "gemini": ("/hooks/gemini/BeforeTool", fixture("gemini/basic/07-BeforeTool.json")),
    "copilot": ("/hooks/copilot/preToolUse", fixture("copilot/basic/04-preToolUse.json")),
}


@dataclass
class Team:
    client: TestClient
    token: dict[str, str]
    inside: str  # a session of the token's workspace
    outside: str  # a session of another workspace
    task: str  # a task of the token's workspace
    dispatch: str  # a hook dispatch of the token's own session

    def write(self, route: str, session_id: str, headers: dict[str, str]) -> Any:
        path, body = ROUTES[route]
        if route == "events":
            return self.client.post(path.format(id=session_id), json=body, headers=headers)
        named = {**headers, "x-tachograph-session-id": session_id}
        return self.client.post(path, json=body, headers=named)


@pytest.fixture
def team(settings: Settings) -> Iterator[Team]:
    # Tasks are never claimed here: an attempt would append to the log mid-test.
    app = create_app(settings.with_(api_key=BOOTSTRAP, task_poll_interval_s=3600))
    with TestClient(app, raise_server_exceptions=False) as client:
        (settings.workspace_root / "team").mkdir()
        made = client.post(
            "/api/workspaces", json={"id": "team", "path": "team"}, headers=ADMIN_HEADERS
        )
        assert made.status_code == 201, made.text
        token = {"x-tachograph-key": issue(client, role="agent", workspaceId="team")}

        def opened(workspace: str) -> str:
            made = client.post(
                "/api/sessions", json={"workspaceId": workspace}, headers=ADMIN_HEADERS
            )
            return str(made.json()["id"])

        inside, outside = opened("team"), opened("default")
        task = client.post(
            "/api/tasks", json={"workspaceId": "team", "prompt": "x"}, headers=ADMIN_HEADERS
        )
        assert task.status_code == 201, task.text
        own = client.post(f"/api/sessions/{inside}/events", json={"event": "Stop"}, headers=token)
        assert own.status_code == 200, own.text
        yield Team(client, token, inside, outside, task.json()["id"], own.json()["dispatchId"])


def test_a_workspace_token_cannot_name_anything_but_its_workspaces_sessions(
    team: Team,
) -> None:
    refusals = {
        team.task: "which is a Task, not a session",
        team.dispatch: "which is a HookDispatch, not a session",
        str(workspace_id("team")): "which is a Workspace, not a session",
        team.outside: "which is in another workspace",
    }
    for route in ROUTES:
        for named, problem in refusals.items():
            for attempt in range(2):  # the second time after the id was looked up once
                before = log_head(team.client)
                refused = team.write(route, named, team.token)
                assert refused.status_code == 403, (route, attempt, refused.text)
                message = refused.json()["message"]
                assert "bound to workspace 'team'" in message and named in message, message
                assert problem in message, message
                assert log_head(team.client) == before, (route, named)
        # Its own workspace's session takes the same request.
        written = team.write(route, team.inside, team.token)
        assert written.status_code == 200, (route, written.text)
    # A signal names its session too.
    signal = {"agentId": "claude", "traceId": "t1", "kind": "failure", "goal": "build"}
    for named, problem in refusals.items():
        before = log_head(team.client)
        refused = team.client.post(
            "/api/autonomy/signals", json={**signal, "sessionId": named}, headers=team.token
        )
        assert refused.status_code == 403 and problem in refused.json()["message"], refused.text
        assert log_head(team.client) == before
    about_own = {**signal, "sessionId": team.inside}
    assert (
        team.client.post("/api/autonomy/signals", json=about_own, headers=team.token).status_code
        == 201
    )


def test_no_caller_records_events_under_an_aggregate_that_is_not_a_session(
    team: Team,
) -> None:
    for route in ROUTES:
        if route == "events":
            continue  # it never creates a session: 404, as for any id without one
        before = log_head(team.client)
        refused = team.write(route, team.task, ADMIN_HEADERS)
        assert refused.status_code == 409, (route, refused.text)
        assert refused.json()["message"] == f"{team.task} is a Task, not a session."
        assert log_head(team.client) == before
    missing = team.write("events", team.task, ADMIN_HEADERS)
    assert missing.status_code == 404
