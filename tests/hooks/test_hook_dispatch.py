"""Tests of the pure hook dispatch rules (spec §6.2) with an in-memory transport."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from domain.hook_config import HookHandler
from domain.hook_dispatch import (
    CONTEXT_CAP,
    DEFAULT_REDACTED_TOOLS,
    Decision,
    Dispatch,
    HandlerDecision,
    HandlerFailure,
    HandlerRequest,
    HandlerRun,
    match_key,
    redact_tool_input,
)
from infra.hook_wire import TransportReply, ask, build_request_body, parse_handler_response
from ingest.service import run_handlers

Reply = TransportReply | Callable[[bytes], TransportReply]


def ok(**answer: Any) -> TransportReply:
    """A 200 reply carrying `answer` (schemaVersion 1 added)."""
    body = json.dumps({"schemaVersion": 1, **answer}).encode()
    return TransportReply(200, body, None, 3.4)


def failed(failure: str) -> TransportReply:
    """A transport failure."""
    return TransportReply(None, None, failure, 7.6)


@dataclass
class FakeTransport:
    """Answers per handler id from a script and records the bodies it was sent."""

    script: dict[str, Reply]
    sent: list[tuple[str, dict[str, Any]]] = field(default_factory=list)

    def call(self, handler: HookHandler, body: bytes) -> TransportReply:
        self.sent.append((handler.id, json.loads(body)))
        reply = self.script[handler.id]
        return reply(body) if callable(reply) else reply

    def sent_ids(self) -> list[str]:
        return [handler_id for handler_id, _ in self.sent]


class ExplodingTransport:
    """Breaks the never-raise contract."""

    def call(self, handler: HookHandler, body: bytes) -> TransportReply:
        raise RuntimeError("boom")


def hook(hook_id: str, event: str = "PreToolUse", mode: str = "closed") -> HookHandler:
    """A handler for tests."""
    return HookHandler(
        id=hook_id,
        event=event,
        url=f"https://hooks.example.com/{hook_id}",
        matcher=None,
        timeout_ms=2000,
        failure_mode=mode,  # type: ignore[arg-type]
        secret_env=None,
    )


# §6.2 detail keys the request carries as fields of its own.
_OWN = {
    "toolInput": "tool_input",
    "toolResponse": "tool_response",
    "prompt": "prompt",
    "lastAssistantMessage": "last_assistant_message",
    "subagentId": "subagent_id",
}


def request(event: str = "PreToolUse", **detail: Any) -> HandlerRequest:
    """A handler request, its detail written as §6.2 sends it; tool events get a tool."""
    tool = event in {"PreToolUse", "PostToolUse", "PostToolUseFailure"}
    detail = detail or ({"toolInput": {"command": "ls"}} if tool else {})
    own = {_OWN[key]: detail.pop(key) for key in list(detail) if key in _OWN}
    return HandlerRequest(
        event_id="evt-1",
        event=event,
        session_id="sess-1",
        turn_id="turn-1",
        tool_call_id="call-1" if tool else None,
        tool_name="Bash" if tool else None,
        agent="claude-code",
        model=None,
        timestamp="2025-01-02T03:04:05Z",
        detail=detail,
        **own,
    )


def run_dispatch(
    req: HandlerRequest,
    handlers: list[HookHandler],
    transport: Any,
    *,
    stop_continues_so_far: int = 0,
) -> Decision:
    """The ingest service's handler loop over the wire, against a scripted transport."""
    dispatch = Dispatch(req, stop_continues_so_far=stop_continues_so_far)
    return run_handlers(dispatch, handlers, lambda h, r: ask(transport, h, r))


def key_of(req: HandlerRequest) -> str | None:
    return match_key(req.event, req.tool_name, req.subagent_id)


# --- request body ------------------------------------------------------------------------


def test_request_body_is_compact_and_omits_absent_optionals() -> None:
    body = build_request_body(request("PreToolUse", toolInput={"command": "ls"}))
    assert body.startswith(b'{"schemaVersion":1,"eventId":"evt-1","event":"PreToolUse",')
    assert body.endswith(b'"detail":{"toolInput":{"command":"ls"}}}')
    assert json.loads(body) == {
        "schemaVersion": 1,
        "eventId": "evt-1",
        "event": "PreToolUse",
        "sessionId": "sess-1",
        "turnId": "turn-1",
        "toolCallId": "call-1",
        "toolName": "Bash",
        "agent": "claude-code",
        "timestamp": "2025-01-02T03:04:05Z",
        "detail": {"toolInput": {"command": "ls"}},
    }
    assert list(json.loads(body)) == [
        "schemaVersion",
        "eventId",
        "event",
        "sessionId",
        "turnId",
        "toolCallId",
        "toolName",
        "agent",
        "timestamp",
        "detail",
    ]


def test_request_body_keeps_turn_id_null_and_utf8() -> None:
    req = HandlerRequest(
        event_id="e",
        event="UserPromptSubmit",
        session_id="s",
        timestamp="t",
        prompt="é",
    )
    body = build_request_body(req)
    assert "é".encode() in body
    assert json.loads(body)["turnId"] is None
    assert "toolName" not in json.loads(body)


# --- response parsing --------------------------------------------------------------------


def parse(event: str, answer: Any, status: int = 200) -> HandlerDecision | HandlerFailure:
    body = answer if isinstance(answer, bytes) else json.dumps(answer).encode()
    return parse_handler_response(event, status, body)


def test_parse_valid_answers() -> None:
    assert parse("PreToolUse", {"schemaVersion": 1, "outcome": "pass"}) == HandlerDecision(
        "pass", None, None, None
    )
    decision = parse(
        "PreToolUse",
        {
            "schemaVersion": 1,
            "outcome": "modify",
            "reason": "r",
            "additionalContext": "c",
            "replacement": {"command": "ls -la"},
        },
    )
    assert decision == HandlerDecision("modify", "r", "c", {"command": "ls -la"})
    assert parse(
        "UserPromptSubmit", {"schemaVersion": 1, "outcome": "modify", "replacement": "new"}
    ) == HandlerDecision("modify", None, None, "new")
    assert parse("Stop", {"schemaVersion": 1, "outcome": "continue", "reason": "go on"}) == (
        HandlerDecision("continue", "go on", None, None)
    )
    assert parse("SubagentStart", {"schemaVersion": 1, "outcome": "deny"}) == HandlerDecision(
        "deny", None, None, None
    )


FAILURES: list[tuple[str, str, Any, int, str]] = [
    ("500", "PreToolUse", {"schemaVersion": 1, "outcome": "pass"}, 500, "status"),
    ("302", "PreToolUse", {"schemaVersion": 1, "outcome": "pass"}, 302, "status"),
    ("empty body", "PreToolUse", b"", 200, "malformed"),
    ("not json", "PreToolUse", b"{nope", 200, "malformed"),
    ("not utf8", "PreToolUse", b'{"outcome":"\xff"}', 200, "malformed"),
    ("array", "PreToolUse", [1], 200, "malformed"),
    ("nan", "PreToolUse", b'{"schemaVersion":1,"outcome":"pass","reason":NaN}', 200, "malformed"),
    (
        "duplicate key",
        "PreToolUse",
        b'{"schemaVersion":1,"outcome":"deny","outcome":"pass"}',
        200,
        "malformed",
    ),
    ("no schema", "PreToolUse", {"outcome": "pass"}, 200, "malformed"),
    ("schema 2", "PreToolUse", {"schemaVersion": 2, "outcome": "pass"}, 200, "malformed"),
    ("schema true", "PreToolUse", {"schemaVersion": True, "outcome": "pass"}, 200, "malformed"),
    ("schema 1.0", "PreToolUse", b'{"schemaVersion":1.0,"outcome":"pass"}', 200, "malformed"),
    (
        "unknown key",
        "PreToolUse",
        {"schemaVersion": 1, "outcome": "pass", "decision": "x"},
        200,
        "malformed",
    ),
    ("no outcome", "PreToolUse", {"schemaVersion": 1}, 200, "malformed"),
    ("outcome type", "PreToolUse", {"schemaVersion": 1, "outcome": 1}, 200, "malformed"),
    (
        "deny on observational",
        "PostToolUse",
        {"schemaVersion": 1, "outcome": "deny"},
        200,
        "disallowed_outcome",
    ),
    (
        "continue on PreToolUse",
        "PreToolUse",
        {"schemaVersion": 1, "outcome": "continue"},
        200,
        "disallowed_outcome",
    ),
    (
        "deny on Stop",
        "Stop",
        {"schemaVersion": 1, "outcome": "deny"},
        200,
        "disallowed_outcome",
    ),
    (
        "unknown outcome",
        "PreToolUse",
        {"schemaVersion": 1, "outcome": "allow"},
        200,
        "disallowed_outcome",
    ),
    (
        "reason type",
        "PreToolUse",
        {"schemaVersion": 1, "outcome": "deny", "reason": None},
        200,
        "malformed",
    ),
    (
        "context type",
        "PreToolUse",
        {"schemaVersion": 1, "outcome": "pass", "additionalContext": ["x"]},
        200,
        "malformed",
    ),
    (
        "modify without replacement",
        "PreToolUse",
        {"schemaVersion": 1, "outcome": "modify"},
        200,
        "malformed",
    ),
    (
        "replacement with pass",
        "PreToolUse",
        {"schemaVersion": 1, "outcome": "pass", "replacement": {}},
        200,
        "malformed",
    ),
    (
        "tool replacement string",
        "PreToolUse",
        {"schemaVersion": 1, "outcome": "modify", "replacement": "ls"},
        200,
        "malformed",
    ),
    (
        "prompt replacement object",
        "UserPromptSubmit",
        {"schemaVersion": 1, "outcome": "modify", "replacement": {"prompt": "x"}},
        200,
        "malformed",
    ),
    (
        "subagent replacement null",
        "SubagentStart",
        {"schemaVersion": 1, "outcome": "modify", "replacement": None},
        200,
        "malformed",
    ),
    (
        "reason over cap",
        "PreToolUse",
        {"schemaVersion": 1, "outcome": "deny", "reason": "é" * 1025},
        200,
        "over_cap",
    ),
    (
        "context over cap",
        "PreToolUse",
        {"schemaVersion": 1, "outcome": "pass", "additionalContext": "x" * 16385},
        200,
        "over_cap",
    ),
    ("body over cap", "PreToolUse", b" " * 65537, 200, "over_cap"),
]


@pytest.mark.parametrize(
    ("event", "answer", "status", "failure"),
    [case[1:] for case in FAILURES],
    ids=[case[0] for case in FAILURES],
)
def test_parse_failures(event: str, answer: Any, status: int, failure: str) -> None:
    result = parse(event, answer, status)
    assert isinstance(result, HandlerFailure)
    assert result.failure == failure
    assert result.message


def test_caps_are_inclusive_and_in_utf8_bytes() -> None:
    answer = {"schemaVersion": 1, "outcome": "deny", "reason": "é" * 1024}
    assert isinstance(parse("PreToolUse", answer), HandlerDecision)
    answer = {"schemaVersion": 1, "outcome": "pass", "additionalContext": "x" * CONTEXT_CAP}
    assert isinstance(parse("PreToolUse", answer), HandlerDecision)


def test_parse_without_status_is_a_status_failure() -> None:
    result = parse_handler_response("PreToolUse", None, b"{}")
    assert isinstance(result, HandlerFailure)
    assert result.failure == "status"


# --- chaining ----------------------------------------------------------------------------


def test_no_handlers_is_pass() -> None:
    result = run_dispatch(request(), [], FakeTransport({}))
    assert (result.outcome, result.reason, result.additional_context, result.replacement) == (
        "pass",
        None,
        None,
        None,
    )
    assert result.runs == ()


def test_all_pass_runs_every_handler_in_order() -> None:
    transport = FakeTransport({"a": ok(outcome="pass"), "b": ok(outcome="pass", reason="fine")})
    result = run_dispatch(request(), [hook("a"), hook("b")], transport)
    assert result.outcome == "pass"
    assert result.reason is None
    assert transport.sent_ids() == ["a", "b"]
    assert list(result.runs) == [
        HandlerRun("a", "pass", None, None, 3),
        HandlerRun("b", "pass", None, "fine", 3),
    ]


def test_modify_chains_tool_input_to_next_handler() -> None:
    transport = FakeTransport(
        {
            "a": ok(outcome="modify", replacement={"command": "ls -a"}, reason="safer"),
            "b": ok(outcome="pass"),
            "c": ok(outcome="modify", replacement={"command": "ls -la"}),
            "d": ok(outcome="pass"),
        }
    )
    handlers = [hook("a"), hook("b"), hook("c"), hook("d")]
    result = run_dispatch(request(), handlers, transport)
    inputs = [body["detail"]["toolInput"] for _, body in transport.sent]
    assert inputs == [
        {"command": "ls"},
        {"command": "ls -a"},
        {"command": "ls -a"},
        {"command": "ls -la"},
    ]
    assert result.outcome == "modify"
    assert result.replacement == {"command": "ls -la"}
    assert [run.outcome for run in result.runs] == ["modify", "pass", "modify", "pass"]


@pytest.mark.parametrize("event", ["UserPromptSubmit", "SubagentStart"])
def test_modify_chains_prompt(event: str) -> None:
    transport = FakeTransport(
        {"a": ok(outcome="modify", replacement="second"), "b": ok(outcome="pass")}
    )
    handlers = [hook("a", event), hook("b", event)]
    result = run_dispatch(request(event, prompt="first"), handlers, transport)
    assert [body["detail"]["prompt"] for _, body in transport.sent] == ["first", "second"]
    assert (result.outcome, result.replacement) == ("modify", "second")


def test_first_deny_stops_chain_and_drops_replacement() -> None:
    transport = FakeTransport(
        {
            "a": ok(outcome="modify", replacement={"command": "x"}),
            "b": ok(outcome="deny", reason="no rm"),
            "c": ok(outcome="pass"),
        }
    )
    result = run_dispatch(request(), [hook("a"), hook("b"), hook("c")], transport)
    assert (result.outcome, result.reason, result.replacement) == ("deny", "no rm", None)
    assert transport.sent_ids() == ["a", "b"]
    assert [run.handler_id for run in result.runs] == ["a", "b"]


def test_deny_without_reason_names_handler() -> None:
    result = run_dispatch(request(), [hook("gate")], FakeTransport({"gate": ok(outcome="deny")}))
    assert result.outcome == "deny"
    assert result.reason == 'denied by hook "gate"'
    assert result.runs[0].reason is None


def test_additional_context_combined_in_order() -> None:
    transport = FakeTransport(
        {
            "a": ok(outcome="pass", additionalContext="one"),
            "b": ok(outcome="pass"),
            "c": ok(outcome="pass", additionalContext="two"),
        }
    )
    result = run_dispatch(request(), [hook("a"), hook("b"), hook("c")], transport)
    assert result.additional_context == "one\n\ntwo"


def test_combined_context_cap_fails_the_overflowing_handler() -> None:
    half = "x" * (CONTEXT_CAP // 2)
    transport = FakeTransport(
        {
            "a": ok(outcome="pass", additionalContext=half),
            "b": ok(outcome="pass", additionalContext=half),  # + separator > cap
            "c": ok(outcome="pass", additionalContext="tail"),
        }
    )
    handlers = [hook("a", mode="open"), hook("b", mode="open"), hook("c", mode="open")]
    result = run_dispatch(request(), handlers, transport)
    assert result.outcome == "pass"
    assert result.additional_context == half + "\n\ntail"
    assert len(result.additional_context.encode()) <= CONTEXT_CAP
    assert result.runs[1].failure == "over_cap"
    assert result.runs[1].outcome == "pass"

    closed = run_dispatch(request(), [hook("a"), hook("b"), hook("c")], transport)
    assert closed.outcome == "deny"
    assert closed.reason == 'hook "b" failed (over_cap); failing closed'
    assert [run.handler_id for run in closed.runs] == ["a", "b"]


def test_context_exactly_at_combined_cap_is_accepted() -> None:
    first = "x" * 100
    second = "y" * (CONTEXT_CAP - 100 - 2)
    transport = FakeTransport(
        {
            "a": ok(outcome="pass", additionalContext=first),
            "b": ok(outcome="pass", additionalContext=second),
        }
    )
    result = run_dispatch(request(), [hook("a"), hook("b")], transport)
    assert result.additional_context is not None
    assert len(result.additional_context.encode()) == CONTEXT_CAP
    assert all(run.failure is None for run in result.runs)


@pytest.mark.parametrize("failure", ["timeout", "transport", "over_cap", "configuration"])
def test_closed_failure_denies_and_stops(failure: str) -> None:
    transport = FakeTransport({"tool-policy": failed(failure), "later": ok(outcome="pass")})
    result = run_dispatch(request(), [hook("tool-policy"), hook("later")], transport)
    assert result.outcome == "deny"
    assert result.reason == f'hook "tool-policy" failed ({failure}); failing closed'
    assert transport.sent_ids() == ["tool-policy"]
    (run,) = result.runs
    assert (run.handler_id, run.outcome, run.failure, run.duration_ms) == (
        "tool-policy",
        "deny",
        failure,
        8,
    )


def test_open_failure_counts_as_pass_and_chain_continues() -> None:
    transport = FakeTransport(
        {
            "flaky": TransportReply(200, b"not json", None, 1.0),
            "next": ok(outcome="modify", replacement={"command": "pwd"}),
        }
    )
    result = run_dispatch(request(), [hook("flaky", mode="open"), hook("next")], transport)
    assert result.outcome == "modify"
    assert result.replacement == {"command": "pwd"}
    assert result.runs[0].outcome == "pass"
    assert result.runs[0].failure == "malformed"
    assert result.runs[0].reason is not None
    assert result.runs[0].reason.startswith('hook "flaky" failed (malformed); failing open')


def test_disallowed_outcome_on_observational_event_fails_open() -> None:
    transport = FakeTransport({"obs": ok(outcome="deny")})
    result = run_dispatch(request("PostToolUse"), [hook("obs", "PostToolUse", "open")], transport)
    assert result.outcome == "pass"
    assert result.runs[0].failure == "disallowed_outcome"


def test_non_2xx_status_fails_closed() -> None:
    transport = FakeTransport({"a": TransportReply(503, b"{}", None, 2.0)})
    result = run_dispatch(request(), [hook("a")], transport)
    assert (result.outcome, result.runs[0].failure) == ("deny", "status")


def test_raising_transport_is_a_transport_failure() -> None:
    result = run_dispatch(request(), [hook("a")], ExplodingTransport())
    assert result.outcome == "deny"
    assert result.runs[0].failure == "transport"


def test_unserialisable_detail_is_a_request_failure() -> None:
    req = request("PreToolUse", toolInput={"x": float("nan")})
    transport = FakeTransport({"a": ok(outcome="pass")})
    result = run_dispatch(req, [hook("a", mode="open")], transport)
    assert result.outcome == "pass"
    assert result.runs[0].failure == "request"
    assert transport.sent == []


def test_failure_runs_carry_no_raw_payload() -> None:
    secret = "TOPSECRET-PAYLOAD"
    transport = FakeTransport({"a": TransportReply(200, secret.encode(), None, 1.0)})
    result = run_dispatch(request(), [hook("a")], transport)
    assert secret not in repr(result)


# --- Stop continue -----------------------------------------------------------------------


def test_stop_continue_honoured_under_limit() -> None:
    transport = FakeTransport(
        {"a": ok(outcome="continue", reason="tests fail", additionalContext="run pytest")}
    )
    for so_far in (0, 1, 2):
        result = run_dispatch(
            request("Stop"), [hook("a", "Stop")], transport, stop_continues_so_far=so_far
        )
        assert (result.outcome, result.reason) == ("continue", "tests fail")
        assert result.additional_context == "run pytest"
        assert result.runs[0].continue_capped is False


def test_stop_continue_stops_the_chain() -> None:
    transport = FakeTransport({"a": ok(outcome="continue"), "b": ok(outcome="pass")})
    result = run_dispatch(request("Stop"), [hook("a", "Stop"), hook("b", "Stop")], transport)
    assert result.outcome == "continue"
    assert transport.sent_ids() == ["a"]


def test_stop_continue_over_limit_becomes_pass_and_is_recorded() -> None:
    transport = FakeTransport(
        {"a": ok(outcome="continue", reason="again"), "b": ok(outcome="pass")}
    )
    result = run_dispatch(
        request("Stop"), [hook("a", "Stop"), hook("b", "Stop")], transport, stop_continues_so_far=3
    )
    assert (result.outcome, result.reason) == ("pass", None)
    assert transport.sent_ids() == ["a", "b"]
    assert result.runs[0] == HandlerRun("a", "pass", None, "again", 3, continue_capped=True)


def test_stop_closed_failure_denies() -> None:
    transport = FakeTransport({"a": failed("timeout")})
    result = run_dispatch(request("Stop"), [hook("a", "Stop")], transport)
    assert result.outcome == "deny"
    assert result.reason == 'hook "a" failed (timeout); failing closed'


# --- matching and redaction --------------------------------------------------------------


def test_match_key_per_event() -> None:
    assert key_of(request("PreToolUse")) == "Bash"
    assert key_of(request("PostToolUseFailure")) == "Bash"
    assert key_of(request("SubagentStart", subagentId="agent-1", prompt="p")) == "agent-1"
    assert key_of(request("SubagentStop", subagentId=7)) is None
    assert key_of(request("Stop")) is None


def test_redact_tool_input() -> None:
    assert redact_tool_input("storeSecret", {"value": "s3cr3t"}, DEFAULT_REDACTED_TOOLS) == (
        "[redacted]"
    )
    assert redact_tool_input("Bash", {"command": "ls"}, DEFAULT_REDACTED_TOOLS) == {"command": "ls"}
    assert redact_tool_input(None, {"a": 1}, DEFAULT_REDACTED_TOOLS) == {"a": 1}
    assert redact_tool_input("Bash", {"a": 1}, frozenset({"Bash"})) == "[redacted]"
    assert sorted(DEFAULT_REDACTED_TOOLS) == ["recallSecret", "storeSecret", "updateSecret"]


def test_redacted_input_stays_redacted_after_modify() -> None:
    transport = FakeTransport(
        {"a": ok(outcome="modify", replacement={"value": "new-secret"}), "b": ok(outcome="pass")}
    )
    req = request("PreToolUse", toolInput="[redacted]")
    result = run_dispatch(req, [hook("a"), hook("b")], transport)
    assert [body["detail"]["toolInput"] for _, body in transport.sent] == [
        "[redacted]",
        "[redacted]",
    ]
    assert result.replacement == {"value": "new-secret"}
