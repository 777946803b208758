"""Policy as data through the HTTP API (both stores): documents validated before they are
recorded, revisions activated, rolled back and removed, and the active rules deciding
real Claude Code hooks on the hot path (deny, context, shadow, scopes, who may change)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from infra.settings import Settings
from tests.test_activity_facts import dispatches
from tests.test_agent_adapters_api import claude_session

NO_FORCE_PUSH = """
version: 1
rules:
  - id: no-force-push
    when: >-
      command.commands.exists(c, c.program == "git" && "push" in c.args
        && ("--force" in c.args || "-f" in c.args))
    then: deny
    reason: Force-pushing rewrites shared history; push a new commit instead.
  - id: env-files
    when: paths.exists(p, p.endsWith("/.env"))
    then: deny
    mode: shadow
  - id: tests-hint
    on: [PreToolUse]
    when: tool == "Bash" && input.command.startsWith("pytest")
    then: context
    context: Run the tests with -q.
"""


def pre_tool_use(session: str, command: str, cwd: str = "/work/repo") -> dict[str, Any]:
    return {
        "session_id": session,
        "transcript_path": "/tmp/t.jsonl",
        "cwd": cwd,
        "hook_event_name": "PreToolUse",
        "tool_name": "Bash",
        "tool_input": {"command": command},
        "tool_use_id": f"toolu_{uuid.uuid4().hex[:12]}",
    }


def decision_of(response: Any) -> tuple[str | None, str | None]:
    assert response.status_code == 200, response.text
    out = response.json().get("hookSpecificOutput") or {}
    return out.get("permissionDecision"), out.get("permissionDecisionReason")


def record(client: TestClient, source: str, **extra: Any) -> dict[str, Any]:
    response = client.post("/api/policy/revisions", json={"source": source, **extra})
    assert response.status_code == 201, response.text
    revision: dict[str, Any] = response.json()
    return revision


def test_an_invalid_document_is_refused_naming_the_rule_and_nothing_is_recorded(
    client: TestClient,
) -> None:
    cases = {
        "version: 1\nrules:\n  - {id: typo, when: 'toool == \"Bash\"', then: deny}\n": "typo",
        "version: 1\nrules:\n  - {id: broken, when: 'tool ==', then: deny}\n": "broken",
        "version: 1\nrules:\n  - {id: odd, when: 'true', then: allow}\n": "odd",
        "version: 1\nrules:\n  - {id: str, when: 'tool', then: deny}\n": "str",
        json.dumps(
            {"version": 1, "rules": [{"id": "a", "when": "true", "then": "ask", "on": ["Stop"]}]}
        ): "a",
        "version: 1\nrules:\n  - {id: ctx, when: 'true', then: context}\n": "ctx",
    }
    for source, rule_id in cases.items():
        response = client.post("/api/policy/revisions", json={"source": source})
        assert response.status_code == 422, (source, response.text)
        body = response.json()
        assert body["ruleId"] == rule_id, body
        assert rule_id in body["message"]
    for source in ("version: 2\nrules: []\n", "{not json", "- a list\n", "version: 1\n"):
        response = client.post("/api/policy/revisions", json={"source": source})
        assert response.status_code == 422, response.text
    assert client.get("/api/policy/revisions", params={"all": "true"}).json()["items"] == []
    assert client.get("/api/policy").json()["items"] == []


def test_an_active_rule_denies_a_real_call_and_the_record_names_it(client: TestClient) -> None:
    session = str(uuid.uuid4())
    command = "cd sub && bash -c 'git push --force origin main'"
    revision = record(client, NO_FORCE_PUSH)
    assert revision["active"] is False and revision["number"] == 1
    assert revision["digest"].startswith("sha256:") and revision["mode"] == "enforce"
    # Recorded but not active: nothing bites yet.
    early = client.post("/hooks/claude", json=pre_tool_use(session, command))
    assert decision_of(early)[0] != "deny"
    push = pre_tool_use(session, command)  # a new call: a retried one keeps its first answer

    activated = client.post(f"/api/policy/revisions/{revision['id']}/activate")
    assert activated.status_code == 200 and activated.json()["active"] is True
    decision, reason = decision_of(client.post("/hooks/claude", json=push))
    assert decision == "deny"
    assert reason == "Force-pushing rewrites shared history; push a new commit instead."
    latest = dispatches(client, _session_uuid(client, session))[-1]
    assert latest["outcome"] == "deny"
    assert latest["policy"] == {
        "revision_id": revision["id"],
        "rule_id": "no-force-push",
        "mode": "enforce",
        "outcome": "deny",
    }
    # A plain push, quoted or not, is no force push.
    assert (
        decision_of(client.post("/hooks/claude", json=pre_tool_use(session, "git push")))[0]
        != "deny"
    )

    # A shadow rule records what it would have done; the call runs.
    shadowed = client.post("/hooks/claude", json=pre_tool_use(session, "cat ../repo/.env"))
    assert decision_of(shadowed)[0] != "deny"
    latest = dispatches(client, _session_uuid(client, session))[-1]
    assert latest["policy"]["rule_id"] == "env-files" and latest["policy"]["mode"] == "shadow"
    assert latest["outcome"] == "pass"

    # A context rule adds its text to the answer.
    hinted = client.post("/hooks/claude", json=pre_tool_use(session, "pytest tests"))
    assert hinted.status_code == 200
    assert "Run the tests with -q." in json.dumps(hinted.json())


def test_rollback_and_removal_are_events_and_take_effect_at_once(client: TestClient) -> None:
    session = str(uuid.uuid4())

    def push() -> dict[str, Any]:
        return pre_tool_use(session, "git push -f")

    first = record(client, NO_FORCE_PUSH)
    client.post(f"/api/policy/revisions/{first['id']}/activate")
    lenient = "version: 1\nrules:\n  - {id: nothing, when: 'false', then: deny}\n"
    second = record(client, lenient)
    assert second["number"] == 2
    assert client.post(f"/api/policy/revisions/{second['id']}/activate").status_code == 200
    assert decision_of(client.post("/hooks/claude", json=push()))[0] != "deny"

    rolled = client.post(f"/api/policy/revisions/{first['id']}/rollback")
    assert rolled.status_code == 200, rolled.text
    assert decision_of(client.post("/hooks/claude", json=push()))[0] == "deny"
    # Rolling back to the active revision, or forward, is a conflict that changes nothing.
    assert client.post(f"/api/policy/revisions/{first['id']}/rollback").status_code == 409
    assert client.post(f"/api/policy/revisions/{second['id']}/rollback").status_code == 409
    listed = client.get("/api/policy/revisions").json()
    assert [r["number"] for r in listed["items"]] == [2, 1]
    assert [h["change"] for h in listed["history"]] == [
        "rollback", "activate", "record", "activate", "record",
    ]  # fmt: skip

    assert client.post("/api/policy/remove", json={}).status_code == 200
    assert client.get("/api/policy").json()["items"] == []
    assert decision_of(client.post("/hooks/claude", json=push()))[0] != "deny"
    assert client.post("/api/policy/remove", json={}).status_code == 409
    assert client.post("/api/policy/revisions/nope/activate").status_code == 404


def test_an_active_ask_rule_counts_in_the_longest_hold(client: TestClient) -> None:
    held = json.dumps(
        {"version": 1, "rules": [{"id": "wait", "when": "true", "then": "ask", "timeoutS": 321}]}
    )
    before = client.get("/api/health").json()["longestHoldS"]
    revision = record(client, held)
    assert client.get("/api/health").json()["longestHoldS"] == before  # not active yet
    activated = client.post(f"/api/policy/revisions/{revision['id']}/activate")
    assert activated.status_code == 200, activated.text
    assert client.get("/api/health").json()["longestHoldS"] == 321


def test_a_workspace_policy_judges_only_that_workspaces_sessions(
    client: TestClient, settings: Settings
) -> None:
    (settings.workspace_root / "locked").mkdir()
    created = client.post("/api/workspaces", json={"id": "locked", "path": "locked"})
    assert created.status_code == 201, created.text
    revision = record(client, NO_FORCE_PUSH, workspaceId="locked")
    assert revision["workspaceId"] == "locked"
    client.post(f"/api/policy/revisions/{revision['id']}/activate")
    inside, outside = str(uuid.uuid4()), str(uuid.uuid4())
    headers = {"x-tachograph-workspace": "locked"}
    start = {"session_id": inside, "hook_event_name": "SessionStart", "source": "startup"}
    assert client.post("/hooks/claude", json=start, headers=headers).status_code == 200
    push = pre_tool_use(inside, "git push --force")
    assert decision_of(client.post("/hooks/claude", json=push, headers=headers))[0] == "deny"
    # The session's own workspace counts, not what a later request claims.
    again = pre_tool_use(inside, "git push --force")
    assert decision_of(client.post("/hooks/claude", json=again))[0] == "deny"
    elsewhere = pre_tool_use(outside, "git push --force")
    assert decision_of(client.post("/hooks/claude", json=elsewhere))[0] != "deny"
    assert (
        client.post(
            "/api/policy/revisions", json={"source": NO_FORCE_PUSH, "workspaceId": "ghost"}
        ).status_code
        == 404
    )


def _session_uuid(client: TestClient, agent_session: str) -> str:
    return claude_session({"session_id": agent_session})


@pytest.fixture
def client(settings: Settings) -> Iterator[TestClient]:
    with TestClient(create_app(settings), raise_server_exceptions=False) as test_client:
        yield test_client
