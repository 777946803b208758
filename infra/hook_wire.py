"""The managed-handler wire of SPEC §6.2: request bodies out, strict answers in.

The transport (infra/hook_transport.py) moves bytes; this module is where the
protocol's JSON names live, so the domain's dispatch rules never see them.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any, NoReturn, Protocol

from domain.casing import to_camel
from domain.hook_config import EVENT_OUTCOMES, HookHandler
from domain.hook_dispatch import (
    CONTEXT_CAP,
    FAILURE_DISALLOWED_OUTCOME,
    FAILURE_MALFORMED,
    FAILURE_OVER_CAP,
    FAILURE_REQUEST,
    FAILURE_STATUS,
    FAILURE_TRANSPORT,
    OUTCOMES,
    REASON_CAP,
    RESPONSE_BODY_CAP,
    HandlerDecision,
    HandlerFailure,
    HandlerReply,
    HandlerRequest,
    Outcome,
)
from domain.lifecycle import REPORTED_FIELDS
from domain.lifecycle_events import PROMPT_EVENTS
from domain.strict_json import StrictJSONError, strict_json_object

# The reported facts of a call, under their §6.2 `detail` names.
_REPORTED_IN_DETAIL = tuple((name, to_camel(name)) for name in REPORTED_FIELDS)

_RESPONSE_KEYS = frozenset(
    {"schemaVersion", "outcome", "reason", "additionalContext", "replacement"}
)


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


def ask(transport: HookTransport, handler: HookHandler, request: HandlerRequest) -> HandlerReply:
    """Send `request` to `handler` and parse its answer; never raises."""
    try:
        body = build_request_body(request)
    except (TypeError, ValueError):
        return HandlerReply(HandlerFailure(FAILURE_REQUEST, "request detail is not JSON"), 0)
    started = time.perf_counter()
    try:
        reply = transport.call(handler, body)
    except Exception:  # noqa: BLE001 - a transport breaking its never-raise contract failed
        elapsed = (time.perf_counter() - started) * 1000
        reply = TransportReply(None, None, FAILURE_TRANSPORT, elapsed)
    duration_ms = round(reply.duration_ms)
    if reply.failure is not None:
        return HandlerReply(HandlerFailure(reply.failure, ""), duration_ms)
    return HandlerReply(
        parse_handler_response(request.event, reply.status, reply.body), duration_ms
    )


def build_request_body(request: HandlerRequest) -> bytes:
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
    detail = dict(request.detail)
    own = (
        ("toolInput", request.tool_input),
        ("toolResponse", request.tool_response),
        ("prompt", request.prompt),
        ("lastAssistantMessage", request.last_assistant_message),
        ("subagentId", request.subagent_id),
        *((camel, getattr(request, name)) for name, camel in _REPORTED_IN_DETAIL),
    )
    detail.update((key, value) for key, value in own if value is not None)
    payload["detail"] = detail
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
    if value not in OUTCOMES:
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
    if event in PROMPT_EVENTS and not isinstance(value, str):
        _malformed(f"replacement for {event} must be a string")
    if event == "PreToolUse" and not isinstance(value, dict):
        _malformed("replacement for PreToolUse must be a JSON object")
    return value
