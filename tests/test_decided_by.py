"""`decidedBy`: every recorded decision names its deciding party, through the HTTP API, the
CLI and a rebuild (both stores).

A managed handler that denies and rewrites, an approval rule an operator allows (with a
reason) and denies, an allowance for the session, a rule's timeout, the self-update
floor, and a call nothing objected to; the session
timeline and the activity search say who decided each, `tachograph activity` shows it
in a column, a replay finds no drift, and a read model from before the column existed
is rebuilt with it at start-up.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from bootstrap import build_services
from domain.credentials import SELF_UPDATE_POLICY, Binding
from infra.approval_config_parser import parse_approval_rules
from infra.settings import Settings
from projections.replay import replay
from tests.hook_server import HookServer
from tests.support import run_cli

ADMIN_KEY = "decided-by-admin-key"
ADMIN = {"x-tachograph-key": ADMIN_KEY}
OPERATOR = "key:admin"
RULES = {
    "version": 1,
    "rules": [
        {"id": "risky-git", "tool": "Bash", "match": "git push|terraform apply", "timeoutS": 60},
        {
            "id": "quick-allow",
            "tool": "Bash",
            "match": "^sleepy-allow",
            "timeoutS": 1,
            "onTimeout": "allow",
        },
    ],
}
HOOKS = {
    "version": 1,
    "hooks": {
        "PreToolUse": [{"id": "guard", "type": "http", "url": "$URL/guard", "matcher": ["Bash"]}]
    },
}


def guard(body: dict[str, Any]) -> tuple[int, Any]:
    """The managed handler: refuses `rm -rf`, rewrites `curl` to a dry run, passes the rest."""
    tool_input = body.get("toolInput") or (body.get("detail") or {}).get("toolInput") or {}
    command = str(tool_input.get("command", ""))
    if command.startswith("rm -rf"):
        return 200, {"schemaVersion": 1, "outcome": "deny", "reason": "no recursive deletes"}
    if command.startswith("curl"):
        rewritten = {"command": "echo would fetch"}
        return 200, {
            "schemaVersion": 1,
            "outcome": "modify",
            "reason": "no network",
            "replacement": rewritten,
        }
    return 200, {"schemaVersion": 1, "outcome": "pass"}


@pytest.fixture
def hook_server() -> Iterator[HookServer]:
    server = HookServer()
    server.routes["/guard"] = guard
    yield server
    server.close()


@pytest.fixture
def configured(settings: Settings, hook_server: HookServer) -> Settings:
    parsed = Settings.from_env(
        {
            "TACHOGRAPH_HOOKS": json.dumps(HOOKS).replace("$URL", hook_server.url),
            "TACHOGRAPH_HOOK_ALLOW_INSECURE_LOOPBACK": "1",
        }
    )
    return settings.with_(
        hooks=parsed.hooks,
        hook_allow_insecure_loopback=True,
        approvals=parse_approval_rules(json.dumps(RULES)),
        api_key=ADMIN_KEY,
    )


@pytest.fixture
def api(configured: Settings) -> Iterator[TestClient]:
    with TestClient(create_app(configured), raise_server_exceptions=False) as client:
        yield client


def pre_tool(api: TestClient, session: str, command: str, call_id: str, **headers: str) -> Any:
    """A Bash PreToolUse on the generic route, and its PostToolUse when it may run."""
    body = {
        "event": "PreToolUse",
        "toolName": "Bash",
        "toolInput": {"command": command},
        "toolCallId": call_id,
    }
    response = api.post(f"/api/sessions/{session}/events", json=body, headers=headers or ADMIN)
    assert response.status_code == 200, response.text
    if response.json()["outcome"] != "deny":
        post = {**body, "event": "PostToolUse", "toolResponse": {"stdout": "done"}}
        after = api.post(f"/api/sessions/{session}/events", json=post, headers=headers or ADMIN)
        assert after.status_code == 200, after.text
        return after
    return response


def held(api: TestClient, session: str, command: str, call_id: str) -> dict[str, Any]:
    """Send a call an approval rule holds, on its own thread; its answer once decided."""
    answered: dict[str, Any] = {}
    thread = threading.Thread(
        target=lambda: answered.update(response=pre_tool(api, session, command, call_id))
    )
    thread.start()
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        waiting = api.get("/api/approvals", params={"status": "pending"}, headers=ADMIN).json()
        if waiting["items"]:
            answered.update(approval=waiting["items"][0], thread=thread)
            return answered
        time.sleep(0.05)
    raise AssertionError(f"{command!r} was never held for an operator")


def decide(
    api: TestClient, waiting: dict[str, Any], verdict: str, reason: str, **extra: Any
) -> Any:
    approval = waiting["approval"]
    decided = api.post(
        f"/api/approvals/{approval['id']}/decide",
        json={"decision": verdict, "reason": reason, **extra},
        headers=ADMIN,
    )
    assert decided.status_code == 200, decided.text
    waiting["thread"].join(30)
    return waiting["response"]


def floor_token(api: TestClient, session: str, clone: Path) -> dict[str, str]:
    """A self-update cycle's agent token: its calls are judged by the self-update floor."""
    services = api.app.state.services  # type: ignore[attr-defined]
    binding = Binding(
        session_id=session, task_id=str(uuid.uuid4()), policy=SELF_UPDATE_POLICY, root=str(clone)
    )
    issued = services.keys.issue(f"t-{uuid.uuid4().hex[:8]}", "agent", "test", binding=binding)
    services.runner.wait_for(issued.recorded.position, 5)
    services.credentials.refresh()
    return {"x-tachograph-key": issued.secret}


def new_session(api: TestClient) -> str:
    created = api.post("/api/sessions", json={"workspaceId": "default"}, headers=ADMIN)
    assert created.status_code == 201, created.text
    return str(created.json()["id"])


def party(kind: str, **fields: Any) -> dict[str, Any]:
    nobody = {"id": None, "operator": None, "reason": None, "approvalId": None}
    return {"kind": kind, **nobody, "forSession": None, **fields}


def scenario(api: TestClient, tmp_path: Path) -> tuple[str, str, dict[str, dict[str, Any]], int]:
    """Every kind of decision on one session (the floor's on a second one); returns the
    sessions, what each call must say of its deciding party, and the last position."""
    session = new_session(api)
    pre_tool(api, session, "rm -rf build", "c-deny")
    pre_tool(api, session, "curl https://example.com", "c-modify")
    allowed = held(api, session, "git push origin main", "c-allow")
    allow_id = allowed["approval"]["id"]
    decide(api, allowed, "allow", "release day")
    denied = held(api, session, "terraform apply -auto-approve", "c-refuse")
    deny_id = denied["approval"]["id"]
    decide(api, denied, "deny", "not before the freeze ends")
    last = pre_tool(api, session, "ls -la", "c-none")
    clone = tmp_path / "clone"
    clone.mkdir()
    cycle = new_session(api)
    floored = pre_tool(api, cycle, "cat ~/.ssh/id_rsa", "c-floor", **floor_token(api, cycle, clone))
    assert floored.json()["outcome"] == "deny"
    audit = api.get(
        f"/api/sessions/{cycle}/hooks",
        params={"minPosition": floored.headers["x-tachograph-position"]},
        headers=ADMIN,
    ).json()["items"]
    rule = audit[-1]["handlerId"].removeprefix("tachograph-policy:")
    expected = {
        "c-deny": party("handler", id="guard", reason="no recursive deletes"),
        "c-modify": party("handler", id="guard", reason="no network"),
        "c-allow": party(
            "operator",
            id="risky-git",
            operator=OPERATOR,
            reason="release day",
            approvalId=allow_id,
            forSession=False,
        ),
        "c-refuse": party(
            "operator",
            id="risky-git",
            operator=OPERATOR,
            reason="not before the freeze ends",
            approvalId=deny_id,
            forSession=False,
        ),
        "c-none": party("none"),
        "c-floor": party("policy", id=rule, reason=audit[-1]["reason"]),
    }
    positions = (last.headers["x-tachograph-position"], floored.headers["x-tachograph-position"])
    return session, cycle, expected, max(int(p) for p in positions)


def timeline_calls(api: TestClient, session: str, position: int) -> dict[str, dict[str, Any]]:
    response = api.get(
        f"/api/sessions/{session}/timeline", params={"minPosition": position}, headers=ADMIN
    )
    assert response.status_code == 200, response.text
    return {c["toolCallId"]: c for turn in response.json()["items"] for c in turn["calls"]}


def activity_rows(api: TestClient, position: int) -> dict[str, dict[str, Any]]:
    response = api.get("/api/activity", params={"minPosition": position}, headers=ADMIN)
    assert response.status_code == 200, response.text
    return {row["toolCallId"]: row for row in response.json()["items"]}


def test_every_decision_names_its_deciding_party(api: TestClient, tmp_path: Path) -> None:
    session, cycle, expected, position = scenario(api, tmp_path)
    calls = timeline_calls(api, session, position) | timeline_calls(api, cycle, position)
    rows = activity_rows(api, position)
    for call_id, decided in expected.items():
        assert calls[call_id]["decidedBy"] == decided, call_id
        assert rows[call_id]["decidedBy"] == decided, call_id
    # What the call was told agrees with who decided it.
    decisions = {call_id: calls[call_id]["decision"] for call_id in expected}
    assert decisions == {
        "c-deny": "deny",
        "c-modify": "modify",
        "c-allow": "pass",
        "c-refuse": "deny",
        "c-none": "pass",
        "c-floor": "deny",
    }
    assert calls["c-allow"]["status"] == "ok" and calls["c-refuse"]["status"] == "denied"
    services = api.app.state.services  # type: ignore[attr-defined]
    reports = replay(services.app, services.store, services.projections)
    assert [r.name for r in reports if r.drift] == []


def test_the_cli_shows_who_decided_each_call(
    api: TestClient, configured: Settings, tmp_path: Path
) -> None:
    _, _, expected, _ = scenario(api, tmp_path)
    table = run_cli(configured, "activity")
    assert table.returncode == 0, table.stderr
    header, *rows = table.stdout.splitlines()
    assert header.split()[:7] == [
        "at",
        "sessionId",
        "tool",
        "decision",
        "status",
        "decidedBy",
        "summary",
    ]
    by_summary = {row.rsplit("  ", 1)[-1].strip(): row for row in rows}
    assert f"{OPERATOR} (risky-git)" in by_summary["git push origin main"]
    assert f"{OPERATOR} (risky-git)" in by_summary["terraform apply -auto-approve"]
    assert "handler:guard" in by_summary["rm -rf build"]
    assert "handler:guard" in by_summary["echo would fetch"]
    assert f"policy:{expected['c-floor']['id']}" in by_summary["cat ~/.ssh/id_rsa"]
    assert by_summary["ls -la"].split()[5] == "-"
    ndjson = run_cli(configured, "activity", "--format", "ndjson")
    found = [json.loads(line) for line in ndjson.stdout.splitlines()]
    assert {row["toolCallId"]: row["decidedBy"] for row in found} == expected


def test_read_models_from_before_the_column_are_rebuilt_with_it(
    api: TestClient, configured: Settings, tmp_path: Path
) -> None:
    session, _, expected, position = scenario(api, tmp_path)
    services = api.app.state.services  # type: ignore[attr-defined]
    with services.store.transaction() as cur:
        # As a release before `decidedBy` left them.
        cur.execute("ALTER TABLE rm_timeline DROP COLUMN decided_by")
        cur.execute("ALTER TABLE rm_activity DROP COLUMN decided_by")
    restarted = build_services(configured)
    try:
        restarted.runner.catch_up()
        rows = restarted.store.query(
            "SELECT tool_call_id, decided_by FROM rm_activity WHERE session_id = ?", (session,)
        )
        assert {r["tool_call_id"]: json.loads(r["decided_by"]) for r in rows} == {
            k: v for k, v in expected.items() if k != "c-floor"
        }
        reports = replay(restarted.app, restarted.store, restarted.projections)
        assert [r.name for r in reports if r.drift] == []
    finally:
        restarted.close()
    calls = timeline_calls(api, session, position)
    assert calls["c-allow"]["decidedBy"] == expected["c-allow"]


def test_a_session_allowance_and_a_rule_timeout_name_their_party(api: TestClient) -> None:
    session = new_session(api)
    first = held(api, session, "git push origin a", "c-first")
    decide(api, first, "allow", "this branch only", forSession=True)
    # The same tool later in the session passes on that allowance, without asking.
    later = pre_tool(api, session, "git push origin b", "c-later")
    # Another session (the allowance covers every Bash call of the first): nobody decides.
    other = new_session(api)
    timed_out = pre_tool(api, other, "sleepy-allow now", "c-timeout")
    position = max(int(r.headers["x-tachograph-position"]) for r in (later, timed_out))
    calls = timeline_calls(api, session, position) | timeline_calls(api, other, position)
    granted = party(
        "operator",
        id="risky-git",
        operator=OPERATOR,
        reason="this branch only",
        approvalId=first["approval"]["id"],
        forSession=True,
    )
    assert calls["c-first"]["decidedBy"] == granted
    assert calls["c-later"]["decidedBy"] == granted
    by_rule = calls["c-timeout"]["decidedBy"]
    assert (by_rule["kind"], by_rule["id"], by_rule["operator"]) == (
        "approval",
        "quick-allow",
        None,
    )
    assert "no decision within the deadline" in by_rule["reason"]
    assert calls["c-timeout"]["decision"] == "pass"
    assert activity_rows(api, position)["c-timeout"]["decidedBy"] == by_rule
