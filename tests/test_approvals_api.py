"""Approvals through a real `serve` (both stores): a held hook, decided by an operator.

Claude Code's PreToolUse and PermissionRequest, the generic events route and a handler
answering `ask`; allow, deny, timeout both ways, allow-for-session, and who may decide.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from bootstrap import Services
from domain.approval import Approval
from domain.errors import InvalidState
from infra.settings import Settings, SettingsError
from scheduler.maintenance import expire_orphaned_approvals_job
from tests.hook_server import HookServer, answer
from tests.support import Server, admin_client

pytestmark = pytest.mark.slow

ADMIN_KEY = "approvals-admin-key"
ADMIN = {"x-tachograph-key": ADMIN_KEY}
RULES = {
    "version": 1,
    "rules": [
        {"id": "risky-git", "tool": "Bash", "match": "git push|terraform apply", "timeoutS": 60},
        {"id": "quick-deny", "tool": "Bash", "match": "^sleepy-deny", "timeoutS": 1},
        {
            "id": "quick-allow",
            "tool": "Bash",
            "match": "^sleepy-allow",
            "timeoutS": 1,
            "onTimeout": "allow",
        },
    ],
}


class Held:
    """One hook request sent on its own thread, answered once someone decides."""

    def __init__(self, send: Callable[[], httpx.Response]) -> None:
        self.response: httpx.Response | None = None
        self.answered_at: float | None = None
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._send = send
        self._thread.start()

    def _run(self) -> None:
        self.response = self._send()
        self.answered_at = time.monotonic()

    def result(self, timeout: float = 30) -> httpx.Response:
        self._thread.join(timeout)
        assert self.response is not None, "the held hook was never answered"
        return self.response


@pytest.fixture
def handler() -> Iterator[HookServer]:
    server = HookServer()
    yield server
    server.close()


@pytest.fixture
def serve(settings: Settings, tmp_path: Path, handler: HookServer) -> Iterator[httpx.Client]:
    hooks = {
        "version": 1,
        "hooks": {
            "PreToolUse": [
                {
                    "id": "review-writes",
                    "type": "http",
                    "url": f"{handler.url}/ask",
                    "matcher": ["Write"],
                }
            ]
        },
    }
    env = {
        "TACHOGRAPH_APPROVALS": json.dumps(RULES),
        "TACHOGRAPH_HOOKS": json.dumps(hooks),
        "TACHOGRAPH_HOOK_ALLOW_INSECURE_LOOPBACK": "1",
    }
    with admin_client(settings, tmp_path / "serve.log", env, ADMIN_KEY) as client:
        yield client


def issue(client: httpx.Client, **body: object) -> dict[str, str]:
    issued = client.post("/api/keys", json=body)
    assert issued.status_code == 201, issued.text
    return {"x-tachograph-key": issued.json()["secret"]}


def pre_tool_use(session: str, command: str, tool_use_id: str | None = None) -> dict[str, Any]:
    """A Claude Code 2.1.328 PreToolUse body (the shape of its capture) for one command."""
    return {
        "session_id": session,
        "transcript_path": f"/home/dev/.claude/projects/-repo/{session}.jsonl",
        "cwd": "/home/dev/repo",
        "permission_mode": "default",
        "hook_event_name": "PreToolUse",
        "tool_name": "Bash",
        "tool_input": {"command": command, "description": "run it"},
        "tool_use_id": tool_use_id or f"toolu_{uuid.uuid4().hex[:20]}",
    }


def pending(client: httpx.Client, count: int = 1, timeout: float = 15) -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        items = client.get("/api/approvals", params={"status": "pending"}).json()["items"]
        if len(items) >= count:
            return list(items)
        time.sleep(0.05)
    raise AssertionError(f"fewer than {count} pending approvals")


def hook(client: httpx.Client, agent: dict[str, str], body: dict[str, Any]) -> Held:
    return Held(lambda: client.post("/hooks/claude", json=body, headers=agent, timeout=90))


def audit(
    client: httpx.Client, session_uuid: str, answered: httpx.Response
) -> list[dict[str, Any]]:
    """The session's hook audit, as of the answer's own log position."""
    position = answered.headers["x-tachograph-position"]
    hooks = client.get(f"/api/sessions/{session_uuid}/hooks", params={"minPosition": position})
    return list(hooks.json()["items"])


def test_an_operator_allows_then_denies_held_claude_code_calls(serve: httpx.Client) -> None:
    agent = issue(serve, role="agent", workspaceId="default")
    native = str(uuid.uuid4())
    harmless = serve.post("/hooks/claude", json=pre_tool_use(native, "ls -la"), headers=agent)
    assert harmless.status_code == 200 and harmless.json() == {}  # no rule: not held
    assert serve.get("/api/approvals").json()["items"] == []

    held = hook(serve, agent, pre_tool_use(native, "git push origin main"))
    [request] = pending(serve)
    session_uuid = request["sessionId"]
    assert request["toolName"] == "Bash" and request["inputSummary"] == "git push origin main"
    assert request["ruleId"] == "risky-git" and request["agent"] == "claude-code"
    assert 0 < request["secondsLeft"] <= 60 and request["onTimeout"] == "deny"
    time.sleep(0.3)
    assert held.response is None  # still waiting for a person

    decided = serve.post(
        f"/api/approvals/{request['id']}/decide", json={"decision": "allow", "reason": "release"}
    )
    assert decided.status_code == 200, decided.text
    assert decided.json()["status"] == "decided" and decided.json()["decidedBy"] == "key:admin"
    allowed = held.result()
    assert allowed.status_code == 200 and allowed.json() == {}  # allow → pass
    again = serve.post(f"/api/approvals/{request['id']}/decide", json={"decision": "deny"})
    assert again.status_code == 409 and "decided" in again.json()["message"]

    denied_call = hook(serve, agent, pre_tool_use(native, "terraform apply -auto-approve"))
    [second] = pending(serve)
    serve.post(
        f"/api/approvals/{second['id']}/decide", json={"decision": "deny", "reason": "not today"}
    )
    denied = denied_call.result()
    output = denied.json()["hookSpecificOutput"]
    assert output["permissionDecision"] == "deny"
    assert "not today" in output["permissionDecisionReason"]

    rows = audit(serve, session_uuid, denied)
    runs = [(r["handlerId"], r["outcome"], r["reason"]) for r in rows]
    approval_runs = [r for r in runs if r[0] == "approval:risky-git"]
    assert len(approval_runs) == 2
    assert approval_runs[0][1] == "pass" and "allowed by key:admin" in approval_runs[0][2]
    assert approval_runs[1][1] == "deny" and "not today" in approval_runs[1][2]


def test_a_permission_dialog_after_an_allowed_call_is_answered_allow(serve: httpx.Client) -> None:
    agent = issue(serve, role="agent", workspaceId="default")
    native = str(uuid.uuid4())
    body = pre_tool_use(native, "git push origin feature")
    held = hook(serve, agent, body)
    [request] = pending(serve)
    serve.post(f"/api/approvals/{request['id']}/decide", json={"decision": "allow"})
    assert held.result().json() == {}
    # Claude Code's own permission dialog for the same call: no second question.
    dialog = {k: v for k, v in body.items() if k != "tool_use_id"}
    dialog["hook_event_name"] = "PermissionRequest"
    answered = serve.post("/hooks/claude", json=dialog, headers=agent, timeout=10)
    assert answered.json() == {
        "hookSpecificOutput": {
            "hookEventName": "PermissionRequest",
            "decision": {"behavior": "allow"},
        }
    }
    assert len(serve.get("/api/approvals").json()["items"]) == 1


def test_timeouts_settle_by_the_rule_and_nothing_can_decide_them_later(
    serve: httpx.Client,
) -> None:
    agent = issue(serve, role="agent", workspaceId="default")
    native = str(uuid.uuid4())
    started = time.monotonic()
    deny = hook(serve, agent, pre_tool_use(native, "sleepy-deny now"))
    allow = hook(serve, agent, pre_tool_use(native, "sleepy-allow now"))
    denied, allowed = deny.result(), allow.result()
    assert time.monotonic() - started >= 0.9  # held for the rule's second
    assert denied.json()["hookSpecificOutput"]["permissionDecision"] == "deny"
    assert "No operator decided" in denied.json()["hookSpecificOutput"]["permissionDecisionReason"]
    assert allowed.json() == {}
    position = max(int(r.headers["x-tachograph-position"]) for r in (denied, allowed))
    expired = serve.get(
        "/api/approvals", params={"status": "expired", "minPosition": position}
    ).json()["items"]
    assert sorted(e["decision"] for e in expired) == ["allow", "deny"]
    assert all(e["decidedBy"] == "system" for e in expired)
    late = serve.post(f"/api/approvals/{expired[0]['id']}/decide", json={"decision": "allow"})
    assert late.status_code == 409 and "expired" in late.json()["message"]


def test_allow_for_the_session_passes_later_calls_and_says_why(serve: httpx.Client) -> None:
    agent = issue(serve, role="agent", workspaceId="default")
    native, other = str(uuid.uuid4()), str(uuid.uuid4())
    first = hook(serve, agent, pre_tool_use(native, "git push origin a"))
    [request] = pending(serve)
    refused = serve.post(
        f"/api/approvals/{request['id']}/decide", json={"decision": "deny", "forSession": True}
    )
    assert refused.status_code == 422  # forSession goes with allow only
    serve.post(
        f"/api/approvals/{request['id']}/decide", json={"decision": "allow", "forSession": True}
    )
    assert first.result().json() == {}
    later = serve.post(
        "/hooks/claude", json=pre_tool_use(native, "git push origin b"), headers=agent
    )
    assert later.json() == {}
    assert len(serve.get("/api/approvals").json()["items"]) == 1  # not asked again
    reasons = [
        r["reason"]
        for r in audit(serve, request["sessionId"], later)
        if r["handlerId"] == "approval:session"
    ]
    assert reasons and f"approval {request['id']}" in reasons[0]
    # Another session is still asked.
    elsewhere = hook(serve, agent, pre_tool_use(other, "git push origin c"))
    [asked] = pending(serve)
    assert asked["sessionId"] != request["sessionId"]
    serve.post(f"/api/approvals/{asked['id']}/decide", json={"decision": "deny"})
    assert elsewhere.result().json()["hookSpecificOutput"]["permissionDecision"] == "deny"


def test_only_operators_decide_and_readers_see(serve: httpx.Client) -> None:
    agent = issue(serve, role="agent", workspaceId="default")
    reader = issue(serve, label="rita", role="reader")
    operator = issue(serve, label="otto", role="operator")
    held = hook(serve, agent, pre_tool_use(str(uuid.uuid4()), "git push --force"))
    [request] = pending(serve)
    url = f"/api/approvals/{request['id']}/decide"
    assert serve.post(url, json={"decision": "allow"}, headers=agent).status_code == 403
    assert serve.post(url, json={"decision": "allow"}, headers=reader).status_code == 403
    assert serve.get("/api/approvals", headers=reader).status_code == 200
    assert serve.get("/api/approvals", headers=agent).status_code == 403
    bad = serve.post(url, json={"decision": "maybe"}, headers=operator)
    assert bad.status_code == 422 and "decision" in bad.text
    assert serve.post(url, json={"decision": "allow"}, headers=operator).status_code == 200
    assert held.result().json() == {}
    assert serve.get(f"/api/approvals/{request['id']}").json()["decidedBy"] == "key:otto"


def test_a_handler_may_ask_and_the_generic_route_waits_too(
    serve: httpx.Client, handler: HookServer
) -> None:
    handler.routes["/ask"] = answer("ask", reason="writes to CI config need a look")
    session = serve.post("/api/sessions", json={"workspaceId": "default"}).json()["id"]
    event = {
        "event": "PreToolUse",
        "eventId": "ev-write-1",
        "toolName": "Write",
        "toolCallId": "call-1",
        "toolInput": {"file_path": ".github/workflows/ci.yml", "content": "on: push"},
    }
    held = Held(lambda: serve.post(f"/api/sessions/{session}/events", json=event, timeout=90))
    [request] = pending(serve)
    assert request["handlerId"] == "review-writes" and request["ruleId"] is None
    assert request["requestReason"] == "writes to CI config need a look"
    assert request["inputSummary"] == ".github/workflows/ci.yml"
    serve.post(f"/api/approvals/{request['id']}/decide", json={"decision": "allow"})
    decided = held.result().json()
    assert decided["outcome"] == "pass"
    # A redelivery of the same event gets the recorded decision; nobody is asked again.
    again = serve.post(f"/api/sessions/{session}/events", json=event, timeout=10).json()
    assert again["outcome"] == "pass" and again["dispatchId"] == decided["dispatchId"]
    assert len(serve.get("/api/approvals").json()["items"]) == 1


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ({"version": 1, "rules": [{"id": "a", "tool": "Bash", "match": "("}]}, "rules[0].match"),
        (
            {"version": 1, "rules": [{"id": "a", "tool": "Bash", "mode": 1}]},
            "rules[0].mode: unknown key",
        ),
        (
            {"version": 1, "rules": [{"id": "a", "tool": "Bash"}, {"id": "a", "tool": "Edit"}]},
            "rules[1].id: duplicate id",
        ),
        (
            {"version": 1, "rules": [{"id": "a", "tool": "Bash", "timeoutS": 601}]},
            "rules[0].timeoutS",
        ),
        ({"version": 1, "rules": [{"id": "a", "tool": "Bash", "onTimeout": "ask"}]}, "onTimeout"),
        ({"version": 2, "rules": []}, "version"),
        ({"version": 1, "rules": [{"tool": "Bash"}]}, "rules[0].id: required"),
    ],
)
def test_a_bad_rules_document_refuses_start_up_naming_the_path(
    document: dict[str, Any], message: str
) -> None:
    with pytest.raises(SettingsError, match="TACHOGRAPH_APPROVALS") as refused:
        Settings.from_env({"TACHOGRAPH_APPROVALS": json.dumps(document)})
    assert message in str(refused.value)


def overdue_approval(services: Services, tool_call_id: str, late_by: timedelta) -> Approval:
    """A pending request, stored directly, whose deadline passed `late_by` ago."""
    now = datetime.now(UTC)
    approval = Approval(
        dispatch_id=uuid.uuid4(),
        session_id=uuid.uuid4(),
        workspace_id="default",
        event_name="PreToolUse",
        turn_id=None,
        agent="claude-code",
        tool_name="Bash",
        tool_call_id=tool_call_id,
        input_summary="git push",
        rule_id="risky-git",
        handler_id=None,
        reason=None,
        requested_at=now - late_by - timedelta(minutes=2),
        deadline=now - late_by,
        on_timeout="deny",
    )
    services.app.request_approval(approval)
    return approval


def test_a_request_whose_holder_went_away_is_expired_by_maintenance(services: Services) -> None:
    orphan = overdue_approval(services, "toolu_gone", timedelta(minutes=1))
    services.runner.catch_up()

    assert expire_orphaned_approvals_job(services.app, services.store) == 1
    services.runner.catch_up()
    assert expire_orphaned_approvals_job(services.app, services.store) == 0
    settled = services.app.load(Approval, orphan.id, "Approval")
    assert (settled.status, settled.verdict, settled.actor) == ("expired", "deny", "system")


def test_the_live_stream_tells_operators_of_requests_and_decisions(serve: httpx.Client) -> None:
    from tests.test_live_stream import parse

    agent = issue(serve, role="agent", workspaceId="default")
    reader = issue(serve, label="watcher", role="reader")
    with serve.stream("GET", "/api/stream", headers=reader, timeout=30) as stream:
        messages = parse(stream)
        held = hook(serve, agent, pre_tool_use(str(uuid.uuid4()), "git push origin live"))
        requested = next(m for m in messages if m.event.startswith("approval."))
        assert requested.event == "approval.requested"
        assert requested.data["status"] == "pending"
        assert requested.data["inputSummary"] == "git push origin live"
        serve.post(f"/api/approvals/{requested.data['id']}/decide", json={"decision": "allow"})
        decided = next(m for m in messages if m.event.startswith("approval."))
        assert decided.event == "approval.decided" and decided.id is not None
        assert (decided.data["id"], decided.data["decision"]) == (requested.data["id"], "allow")
        assert requested.id is not None and decided.id > requested.id
    assert held.result().json() == {}


def test_each_new_request_is_posted_signed_to_the_notification_url(
    settings: Settings, tmp_path: Path, handler: HookServer
) -> None:
    from infra.hook_transport import sign

    handler.routes["/notify"] = answer("pass")
    env = {
        "TACHOGRAPH_APPROVALS": json.dumps(RULES),
        "TACHOGRAPH_APPROVAL_NOTIFY": f"{handler.url}/notify",
        "TACHOGRAPH_APPROVAL_NOTIFY_SECRET_ENV": "CHATBOT_SECRET",
        "CHATBOT_SECRET": "s" * 40,
        "TACHOGRAPH_HOOK_ALLOW_INSECURE_LOOPBACK": "1",
    }
    server = Server(settings.with_(api_key=ADMIN_KEY), tmp_path / "notify.log", env)
    try:
        server.wait_ready(headers=ADMIN)
        with httpx.Client(base_url=server.url, headers=ADMIN, timeout=30) as client:
            agent = issue(client, role="agent", workspaceId="default")
            held = hook(client, agent, pre_tool_use(str(uuid.uuid4()), "git push origin bot"))
            [request] = pending(client)
            deadline = time.monotonic() + 10
            while not handler.requests and time.monotonic() < deadline:
                time.sleep(0.05)
            client.post(f"/api/approvals/{request['id']}/decide", json={"decision": "deny"})
            assert held.result().json()["hookSpecificOutput"]["permissionDecision"] == "deny"
    finally:
        server.kill()
    [(path, body, headers)] = handler.requests  # one request, one notification
    assert path == "/notify" and body["type"] == "approval.requested"
    assert body["approval"]["id"] == request["id"]
    assert body["approval"]["inputSummary"] == "git push origin bot"
    assert body["decide"] == f"/api/approvals/{request['id']}/decide"
    raw = json.dumps(body, separators=(",", ":")).encode()
    timestamp = headers["x-tachograph-timestamp"]
    assert headers["x-tachograph-signature"] == sign("s" * 40, timestamp, raw)


def test_a_notification_url_outside_the_hook_rules_refuses_start_up() -> None:
    with pytest.raises(SettingsError, match="TACHOGRAPH_APPROVAL_NOTIFY"):
        Settings.from_env({"TACHOGRAPH_APPROVAL_NOTIFY": "http://chat.example.com/hook"})
    with pytest.raises(SettingsError, match="CHATBOT_SECRET"):
        Settings.from_env(
            {
                "TACHOGRAPH_APPROVAL_NOTIFY": "https://chat.example.com/hook",
                "TACHOGRAPH_HOOK_ALLOWED_HOSTS": "chat.example.com",
                "TACHOGRAPH_APPROVAL_NOTIFY_SECRET_ENV": "CHATBOT_SECRET",
            }
        )


def test_a_decision_after_the_deadline_finds_the_request_expired(services: Services) -> None:
    late = overdue_approval(services, "toolu_late", timedelta(seconds=1))
    with pytest.raises(InvalidState, match="expired"):
        services.app.decide_approval(late.id, "allow", "key:otto", None, True, datetime.now(UTC))
    settled = services.app.load(Approval, late.id, "Approval")
    assert (settled.status, settled.verdict, settled.for_session) == ("expired", "deny", False)
