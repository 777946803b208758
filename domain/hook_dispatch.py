"""Pure hook dispatch rules (spec §6.2): request bodies, strict responses, chaining."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal, NoReturn, Protocol

from domain.hook_config import EVENT_OUTCOMES, SUBAGENT_EVENTS, TOOL_EVENTS, HookHandler
from domain.strict_json import StrictJSONError, strict_json_object

Outcome = Literal["pass", "deny", "modify", "continue"]

# Failure classes recorded on handler runs.
FAILURE_TIMEOUT = "timeout"
FAILURE_TRANSPORT = "transport"
FAILURE_CONFIGURATION = "configuration"
FAILURE_OVER_CAP = "over_cap"
FAILURE_STATUS = "status"
FAILURE_MALFORMED = "malformed"
FAILURE_DISALLOWED_OUTCOME = "disallowed_outcome"
FAILURE_REQUEST = "request"

RESPONSE_BODY_CAP = 64 * 1024
REASON_CAP = 2 * 1024
CONTEXT_CAP = 16 * 1024
STOP_CONTINUE_LIMIT = 3
CONTEXT_SEPARATOR = "\n\n"

REDACTED = "[redacted]"
DEFAULT_REDACTED_TOOLS: frozenset[str] = frozenset({"storeSecret", "recallSecret", "updateSecret"})

_RESPONSE_KEYS = frozenset(
    {"schemaVersion", "outcome", "reason", "additionalContext", "replacement"}
)
_OUTCOMES: frozenset[str] = frozenset({"pass", "deny", "modify", "continue"})
_PROMPT_EVENTS = frozenset({"UserPromptSubmit", "SubagentStart"})


@dataclass(frozen=True)
class TransportReply:
    """What the transport got back; `failure` is a failure class when the call failed."""

    status: int | None
    body: bytes | None
    failure: str | None
    duration_ms: float


class HookTransport(Protocol):
    """Sends one request body to one handler; must never raise."""

    def call(self, handler: HookHandler, body: bytes) -> TransportReply:
        """POST `body` to `handler.url` within `handler.timeout_ms`."""


@dataclass(frozen=True, kw_only=True)
class DispatchRequest:
    """One occurrence of an event to dispatch; `detail` keys are camelCase."""

    event_id: str
    event: str
    session_id: str
    turn_id: str | None = None
    tool_call_id: str | None = None
    tool_name: str | None = None
    agent: str | None = None
    model: str | None = None
    timestamp: str
    detail: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class HandlerDecision:
    """A valid handler answer."""

    outcome: Outcome
    reason: str | None
    additional_context: str | None
    replacement: Any | None


@dataclass(frozen=True)
class HandlerFailure:
    """An unusable handler answer: failure class plus an explanation (may be empty)."""

    failure: str
    message: str


@dataclass(frozen=True)
class HandlerRun:
    """Audit record of one handler run (no raw payloads)."""

    handler_id: str
    outcome: Outcome
    failure: str | None
    reason: str | None
    duration_ms: int
    # True when a Stop `continue` was downgraded to pass by the per-turn limit.
    continue_capped: bool = False


@dataclass(frozen=True)
class DispatchResult:
    """Combined decision of a handler chain."""

    outcome: Outcome
    reason: str | None
    additional_context: str | None
    replacement: Any | None
    runs: list[HandlerRun]


def redact_tool_input(
    tool_name: str | None, tool_input: Any, redacted_tools: frozenset[str]
) -> Any:
    """Replace the input of a listed tool by the string "[redacted]"."""
    if tool_name is not None and tool_name in redacted_tools:
        return REDACTED
    return tool_input


def match_key(request: DispatchRequest) -> str | None:
    """The subject matchers select on: tool name for tool events, subagent id for subagents."""
    if request.event in TOOL_EVENTS:
        return request.tool_name
    if request.event in SUBAGENT_EVENTS:
        subagent_id = request.detail.get("subagentId")
        return subagent_id if isinstance(subagent_id, str) else None
    return None


def build_request_body(request: DispatchRequest) -> bytes:
    """Compact UTF-8 JSON request body of §6.2; raises ValueError/TypeError if not JSON-able."""
    payload: dict[str, Any] = {
        "schemaVersion": 1,
        "eventId": request.event_id,
        "event": request.event,
        "sessionId": request.session_id,
        "turnId": request.turn_id,
    }
    optional = (
        ("toolCallId", request.tool_call_id),
        ("toolName", request.tool_name),
        ("agent", request.agent),
        ("model", request.model),
    )
    payload.update((key, value) for key, value in optional if value is not None)
    payload["timestamp"] = request.timestamp
    payload["detail"] = dict(request.detail)
    text = json.dumps(payload, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return text.encode("utf-8")


class _Malformed(Exception):
    """Internal: a response violated the contract."""

    def __init__(self, failure: str, message: str) -> None:
        super().__init__(message)
        self.failure = failure
        self.message = message


def _malformed(message: str, failure: str = FAILURE_MALFORMED) -> NoReturn:
    """Abort response parsing with a failure class."""
    raise _Malformed(failure, message)


def parse_handler_response(
    event: str, status: int | None, body: bytes | None
) -> HandlerDecision | HandlerFailure:
    """Strictly validate a handler's answer for `event`."""
    try:
        return _parse_response(event, status, body)
    except _Malformed as exc:
        return HandlerFailure(exc.failure, exc.message)


def _parse_response(event: str, status: int | None, body: bytes | None) -> HandlerDecision:
    """Validate status, JSON shape, outcome, types and caps; raise _Malformed on violation."""
    if status is None or not 200 <= status <= 299:
        _malformed(f"handler answered HTTP status {status}", FAILURE_STATUS)
    if body is None or not body:
        _malformed("response body is empty")
    if len(body) > RESPONSE_BODY_CAP:
        _malformed(f"response body is over {RESPONSE_BODY_CAP} bytes", FAILURE_OVER_CAP)
    obj = _decode_object(body)
    if set(obj) - _RESPONSE_KEYS:
        # Key names are not echoed: audit records carry no handler payload.
        _malformed("response has unknown keys")
    schema_version = obj.get("schemaVersion")
    if type(schema_version) is not int or schema_version != 1:
        _malformed("response schemaVersion must be 1")
    outcome = _outcome(event, obj.get("outcome"))
    return HandlerDecision(
        outcome=outcome,
        reason=_capped_string(obj, "reason", REASON_CAP),
        additional_context=_capped_string(obj, "additionalContext", CONTEXT_CAP),
        replacement=_replacement(event, outcome, obj),
    )


def _decode_object(body: bytes) -> dict[str, Any]:
    """Decode a UTF-8 JSON object."""
    try:
        return strict_json_object(body)
    except StrictJSONError as exc:
        _malformed(f"response {exc}")


def _outcome(event: str, value: Any) -> Outcome:
    """The outcome must be a string the event allows (unknown events only allow pass)."""
    if not isinstance(value, str):
        _malformed("response outcome must be a string")
    if value not in _OUTCOMES:
        _malformed(f"unknown outcome for {event}", FAILURE_DISALLOWED_OUTCOME)
    if value not in EVENT_OUTCOMES.get(event, frozenset({"pass"})):
        _malformed(f'outcome "{value}" is not allowed for {event}', FAILURE_DISALLOWED_OUTCOME)
    outcome: Outcome = value  # type: ignore[assignment]  # narrowed by the checks above
    return outcome


def _capped_string(obj: dict[str, Any], key: str, cap: int) -> str | None:
    """Optional string field with a UTF-8 byte cap (over-cap is a failure, never truncated)."""
    if key not in obj:
        return None
    value = obj[key]
    if not isinstance(value, str):
        _malformed(f"response {key} must be a string")
    if len(value.encode("utf-8")) > cap:
        _malformed(f"response {key} is over {cap} bytes", FAILURE_OVER_CAP)
    return value


def _replacement(event: str, outcome: Outcome, obj: dict[str, Any]) -> Any | None:
    """Replacement: required for modify (string for prompts, object for tools), else absent."""
    if outcome != "modify":
        if "replacement" in obj:
            _malformed("response replacement is only allowed with outcome modify")
        return None
    if "replacement" not in obj:
        _malformed("outcome modify requires a replacement")
    value = obj["replacement"]
    if event in _PROMPT_EVENTS and not isinstance(value, str):
        _malformed(f"replacement for {event} must be a string")
    if event == "PreToolUse" and not isinstance(value, dict):
        _malformed("replacement for PreToolUse must be a JSON object")
    return value


def run_dispatch(
    request: DispatchRequest,
    handlers: list[HookHandler],
    transport: HookTransport,
    *,
    stop_continues_so_far: int = 0,
) -> DispatchResult:
    """Run `handlers` sequentially and combine their answers per §6.2."""
    chain = _Chain(request, stop_continues_so_far)
    for handler in handlers:
        result = chain.step(handler, transport)
        if result is not None:
            return result
    return chain.finish()


def _failure_reason(handler: HookHandler, failure: str) -> str:
    """Decision reason for a failed handler; names the handler, never echoes its payload."""
    mode = "failing closed" if handler.failure_mode == "closed" else "failing open"
    return f"hook {json.dumps(handler.id)} failed ({failure}); {mode}"


def _call(handler: HookHandler, body: bytes, transport: HookTransport) -> TransportReply:
    """Call the transport; a transport that breaks its never-raise contract is a failure."""
    started = time.perf_counter()
    try:
        return transport.call(handler, body)
    except Exception:
        elapsed = (time.perf_counter() - started) * 1000
        return TransportReply(None, None, FAILURE_TRANSPORT, elapsed)


class _Chain:
    """Mutable state while one handler chain runs."""

    def __init__(self, request: DispatchRequest, stop_continues_so_far: int) -> None:
        self.request = request
        self.continue_allowed = stop_continues_so_far < STOP_CONTINUE_LIMIT
        self.contexts: list[str] = []
        self.context_bytes = 0
        self.runs: list[HandlerRun] = []
        self.modified = False
        self.replacement: Any | None = None
        self.modify_reason: str | None = None

    def step(self, handler: HookHandler, transport: HookTransport) -> DispatchResult | None:
        """Run one handler; return a final result when the chain stops here."""
        answer, duration_ms = self._ask(handler, transport)
        if isinstance(answer, HandlerDecision):
            answer = self._admit_context(answer)
        if isinstance(answer, HandlerFailure):
            return self._fail(handler, answer, duration_ms)
        return self._apply(handler, answer, duration_ms)

    def _ask(
        self, handler: HookHandler, transport: HookTransport
    ) -> tuple[HandlerDecision | HandlerFailure, int]:
        """Send the current request to `handler` and parse its answer."""
        try:
            body = build_request_body(self.request)
        except (TypeError, ValueError):
            return HandlerFailure(FAILURE_REQUEST, "request detail is not JSON"), 0
        reply = _call(handler, body, transport)
        duration_ms = round(reply.duration_ms)
        if reply.failure is not None:
            return HandlerFailure(reply.failure, ""), duration_ms
        return parse_handler_response(self.request.event, reply.status, reply.body), duration_ms

    def _admit_context(self, decision: HandlerDecision) -> HandlerDecision | HandlerFailure:
        """Add the decision's context unless it pushes the combination over the cap."""
        context = decision.additional_context
        if not context:
            return decision
        size = len(context.encode("utf-8"))
        if self.contexts:
            size += len(CONTEXT_SEPARATOR)
        if self.context_bytes + size > CONTEXT_CAP:
            return HandlerFailure(
                FAILURE_OVER_CAP, f"combined additionalContext would exceed {CONTEXT_CAP} bytes"
            )
        self.contexts.append(context)
        self.context_bytes += size
        return decision

    def _fail(
        self, handler: HookHandler, failure: HandlerFailure, duration_ms: int
    ) -> DispatchResult | None:
        """Apply the handler's failure mode: closed denies and stops, open counts as pass."""
        closed = handler.failure_mode == "closed"
        reason = _failure_reason(handler, failure.failure)
        detailed = f"{reason}: {failure.message}" if failure.message else reason
        self._record(handler, "deny" if closed else "pass", failure.failure, detailed, duration_ms)
        return self._result("deny", reason) if closed else None

    def _apply(
        self, handler: HookHandler, decision: HandlerDecision, duration_ms: int
    ) -> DispatchResult | None:
        """Fold a valid decision into the chain."""
        outcome = decision.outcome
        if outcome == "deny":
            self._record(handler, "deny", None, decision.reason, duration_ms)
            default = f"denied by hook {json.dumps(handler.id)}"
            return self._result("deny", decision.reason or default)
        if outcome == "continue":
            return self._continue(handler, decision, duration_ms)
        if outcome == "modify":
            self._modify(decision)
        self._record(handler, outcome, None, decision.reason, duration_ms)
        return None

    def _continue(
        self, handler: HookHandler, decision: HandlerDecision, duration_ms: int
    ) -> DispatchResult | None:
        """Honour Stop `continue` while under the per-turn limit; afterwards it is a pass."""
        if not self.continue_allowed:
            self._record(handler, "pass", None, decision.reason, duration_ms, continue_capped=True)
            return None
        self._record(handler, "continue", None, decision.reason, duration_ms)
        # Like deny, continue is the gate's decisive answer: the turn will not stop.
        return self._result("continue", decision.reason)

    def _modify(self, decision: HandlerDecision) -> None:
        """Make the replacement the next handler's input and the chain's pending result."""
        self.modified = True
        self.replacement = decision.replacement
        self.modify_reason = decision.reason
        detail = dict(self.request.detail)
        if self.request.event == "PreToolUse":
            # A redacted tool stays redacted for later handlers, whatever replaced its input.
            if detail.get("toolInput") != REDACTED:
                detail["toolInput"] = decision.replacement
        else:
            detail["prompt"] = decision.replacement
        self.request = replace(self.request, detail=detail)

    def _record(
        self,
        handler: HookHandler,
        outcome: Outcome,
        failure: str | None,
        reason: str | None,
        duration_ms: int,
        *,
        continue_capped: bool = False,
    ) -> None:
        """Append the audit record of one run."""
        self.runs.append(
            HandlerRun(handler.id, outcome, failure, reason, duration_ms, continue_capped)
        )

    def _result(self, outcome: Outcome, reason: str | None) -> DispatchResult:
        """A final result; modify replacements only survive when the outcome is modify."""
        return DispatchResult(
            outcome=outcome,
            reason=reason,
            additional_context=CONTEXT_SEPARATOR.join(self.contexts) or None,
            replacement=self.replacement if outcome == "modify" else None,
            runs=self.runs,
        )

    def finish(self) -> DispatchResult:
        """Result after every handler ran without stopping the chain."""
        if self.modified:
            return self._result("modify", self.modify_reason)
        return self._result("pass", None)
