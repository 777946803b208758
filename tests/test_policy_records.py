"""The policy rule that decided a call, or would have in shadow mode, on every read
surface (both stores): the hook audit record, the timeline call (read model and log),
the activity row with its `ruleId` and `policyMode` filters, and the session export;
the read models rebuilt from the log say the same."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from bootstrap import Services
from infra.settings import Settings
from projections.replay import replay
from tests.support import run_cli
from tests.test_agent_adapters_api import claude_session
from tests.test_policy_api import NO_FORCE_PUSH, decision_of, pre_tool_use, record


def post_tool_use(pre: dict[str, Any]) -> dict[str, Any]:
    return {
        **pre,
        "hook_event_name": "PostToolUse",
        "tool_response": {"stdout": "", "stderr": "", "interrupted": False},
    }


def test_every_read_surface_names_the_rule_and_a_rebuild_agrees(
    client: TestClient, settings: Settings
) -> None:
    revision = record(client, NO_FORCE_PUSH)
    assert client.post(f"/api/policy/revisions/{revision['id']}/activate").status_code == 200
    agent_session = str(uuid.uuid4())
    session = claude_session({"session_id": agent_session})
    push = pre_tool_use(agent_session, "git push --force origin main")
    env = pre_tool_use(agent_session, "cat .env")
    plain = pre_tool_use(agent_session, "ls")
    assert decision_of(client.post("/hooks/claude", json=push))[0] == "deny"
    for call in (env, plain):
        assert decision_of(client.post("/hooks/claude", json=call))[0] != "deny"
        assert client.post("/hooks/claude", json=post_tool_use(call)).status_code == 200
    denied = {
        "revisionId": revision["id"],
        "ruleId": "no-force-push",
        "mode": "enforce",
        "outcome": "deny",
    }
    shadowed = {"revisionId": revision["id"], "ruleId": "env-files", "mode": "shadow"}
    shadowed["outcome"] = "deny"
    services: Services = client.app.state.services  # type: ignore[attr-defined]
    assert services.runner.wait_for(services.app.recorder.max_notification_id() or 0, 5)

    hooks = client.get(f"/api/sessions/{session}/hooks").json()["items"]
    assert [h["policy"] for h in hooks if h["event"] == "PreToolUse"] == [denied, shadowed, None]
    assert [h["policy"] for h in hooks if h["event"] == "PostToolUse"] == [None, None]

    def timeline_calls(source: str) -> list[dict[str, Any]]:
        turns = client.get(f"/api/sessions/{session}/timeline", params={"source": source})
        return [c for turn in turns.json()["items"] for c in turn["calls"]]

    for source in ("readModel", "log"):
        calls = timeline_calls(source)
        by_call = {c["toolCallId"]: c for c in calls}
        assert by_call[push["tool_use_id"]]["policy"] == denied, source
        # The call ran: its Post (which no rule judged) keeps its Pre's rule.
        assert by_call[env["tool_use_id"]]["policy"] == shadowed, source
        assert by_call[env["tool_use_id"]]["status"] == "ok", source
        assert by_call[plain["tool_use_id"]]["policy"] is None, source

    def activity(**params: str) -> list[dict[str, Any]]:
        response = client.get("/api/activity", params=params)
        assert response.status_code == 200, response.text
        items: list[dict[str, Any]] = response.json()["items"]
        return items

    everything = activity(sessionId=session)
    assert [a["policy"] for a in everything] == [None, shadowed, denied]  # newest first
    # The rule that denied is also who decided; a shadow rule decided nothing.
    reason = "Force-pushing rewrites shared history; push a new commit instead."
    assert [(a["decidedBy"]["kind"], a["decidedBy"]["id"]) for a in everything] == [
        ("none", None),
        ("none", None),
        ("policy", "no-force-push"),
    ]
    assert everything[-1]["decidedBy"]["reason"] == reason
    assert by_call[push["tool_use_id"]]["decidedBy"] == everything[-1]["decidedBy"]
    assert [a["toolCallId"] for a in activity(ruleId="no-force-push")] == [push["tool_use_id"]]
    assert [a["toolCallId"] for a in activity(ruleId="env-files", outcome="pass")] == [
        env["tool_use_id"]
    ]
    assert [a["policy"]["ruleId"] for a in activity(policyMode="shadow")] == ["env-files"]
    assert activity(ruleId="no-such-rule") == []
    # The CLI searches as the API does.
    searched = run_cli(settings, "activity", "--rule", "env-files", "--format", "ndjson")
    assert searched.returncode == 0, searched.stderr
    assert [json.loads(line)["policy"] for line in searched.stdout.splitlines()] == [shadowed]
    table = run_cli(settings, "activity", "--policy-mode", "enforce")
    assert table.returncode == 0 and len(table.stdout.splitlines()) == 2, table.stdout
    assert "policy:no-force-push" in table.stdout
    for bad in ({"ruleId": "no force"}, {"ruleId": "x" * 65}, {"policyMode": "audit"}):
        response = client.get("/api/activity", params=bad)
        assert response.status_code == 422, (bad, response.text)

    exported = client.get(f"/api/sessions/{session}/export")
    assert exported.status_code == 200
    dispatches = [
        json.loads(line)
        for line in exported.text.splitlines()
        if json.loads(line)["type"] == "HookDispatch.Created"
    ]
    pres = [d for d in dispatches if d["data"]["event_name"] == "PreToolUse"]
    assert [d["policy"] for d in pres] == [denied, shadowed, None]
    assert all(d["policy"] is None for d in dispatches if d not in pres)

    reports = replay(services.app, services.store, services.projections)
    assert [r.name for r in reports if r.drift] == []


@pytest.fixture
def client(settings: Settings) -> Iterator[TestClient]:
    with TestClient(create_app(settings), raise_server_exceptions=False) as test_client:
        yield test_client
