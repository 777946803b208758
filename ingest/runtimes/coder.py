"""Coder chat lifecycle webhook: its request body and the ingest mapping, its answers
(§6.6). Standard library only; verifying and signing its JWTs is infra/coder_jwt.py's,
and api/coder_webhook.py binds the two."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from domain.casing import to_camel
from domain.hook_dispatch import Decision
from domain.lifecycle import LifecycleEvent
from domain.strict_json import SYNTAX, StrictJSONError, strict_loads
from ingest.runtimes.claude_code import DENY_REASON, split_fields

AGENT: Final = "coder"
SCHEMA_VERSION: Final = 1
MODEL_CONTEXT_MAX_BYTES: Final = 16 * 1024
TIMEOUT_REASON: Final = "Tachograph did not decide in time; please retry."

EVENT_NAMES: Final[Mapping[str, str]] = {
    "session_start": "SessionStart",
    "user_prompt_submit": "UserPromptSubmit",
    "pre_tool_use": "PreToolUse",
    "post_tool_use": "PostToolUse",
    "pre_compact": "PreCompact",
    "post_compact": "PostCompact",
    "stop": "Stop",
}

# The only events whose answer may carry `permission`; a slow one is denied, not passed.
MUTABLE_TYPES: Final = frozenset({"user_prompt_submit", "pre_tool_use"})

_DATA_FIELDS: Final[Mapping[str, tuple[str, type]]] = {
    "prompt": ("prompt", str),
    "tool_use_id": ("tool_call_id", str),
    "tool_name": ("tool_name", str),
    "tool_input": ("tool_input", dict),
    "tool_response": ("tool_response", object),
}

# meta keys carried in `detail`, renamed where Coder's name would mislead (its workspace is
# not a Tachograph workspace). The other known meta keys become LifecycleEvent fields.
_META_DETAIL: Final[Mapping[str, str]] = {
    "owner_id": "ownerId",
    "workspace_id": "coderWorkspaceId",
    "parent_chat_id": "parentChatId",
    "root_chat_id": "rootChatId",
}
_META_FIELDS: Final = frozenset({"dispatch_id", "schema_version", "chat_id", "turn_id"})


class CoderPayloadError(ValueError):
    """A signed Coder body that is not a request of the webhook's schema (the route
    answers 401 as for any verification failure). `reason`: a snake_case code."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason
        self.detail = detail


@dataclass(frozen=True, slots=True)
class CoderRequest:
    """A verified Coder webhook request."""

    type: str
    dispatch_id: str
    chat_id: str
    owner_id: str
    data: dict[str, Any]
    meta: dict[str, Any]
    claims: dict[str, Any]
    workspace_id: str | None = None
    turn_id: str | None = None
    parent_chat_id: str | None = None
    root_chat_id: str | None = None


def parse_coder_request(raw_body: bytes, claims: dict[str, Any]) -> CoderRequest:
    """Parse `{type, meta, data}` into a CoderRequest."""
    try:
        body = strict_loads(raw_body, refuse_nul=True)
    except StrictJSONError as exc:
        if exc.kind != SYNTAX:
            raise  # JSON the API refuses on every route: the route names the problem
        raise CoderPayloadError("malformed_body", "the body is not JSON") from exc
    if not isinstance(body, dict):
        raise CoderPayloadError("malformed_body", "the body is not a JSON object")
    type_, meta, data = body.get("type"), body.get("meta"), body.get("data", {})
    if not isinstance(type_, str) or not type_:
        raise CoderPayloadError("malformed_body", "type must be a non-empty string")
    if not isinstance(meta, dict) or not isinstance(data, dict):
        raise CoderPayloadError("malformed_body", "meta and data must be objects")
    schema_version = meta.get("schema_version")
    if isinstance(schema_version, bool) or schema_version != SCHEMA_VERSION:
        raise CoderPayloadError(
            "schema_version_mismatch", f"meta.schema_version must be {SCHEMA_VERSION}"
        )
    return CoderRequest(
        type=type_,
        dispatch_id=_required_meta(meta, "dispatch_id"),
        chat_id=_required_meta(meta, "chat_id"),
        owner_id=_required_meta(meta, "owner_id"),
        data=data,
        meta=meta,
        claims=claims,
        workspace_id=_optional_meta(meta, "workspace_id"),
        turn_id=_optional_meta(meta, "turn_id"),
        parent_chat_id=_optional_meta(meta, "parent_chat_id"),
        root_chat_id=_optional_meta(meta, "root_chat_id"),
    )


def _required_meta(meta: Mapping[str, Any], key: str) -> str:
    """Return a required non-empty string of `meta`."""
    value = meta.get(key)
    if not isinstance(value, str) or not value:
        raise CoderPayloadError("malformed_body", f"meta.{key} must be a non-empty string")
    return value


def _optional_meta(meta: Mapping[str, Any], key: str) -> str | None:
    """Return an optional string of `meta` (null or absent: None)."""
    value = meta.get(key)
    if value is not None and not isinstance(value, str):
        raise CoderPayloadError("malformed_body", f"meta.{key} must be a string")
    return value


def coder_subject(chat_id: str) -> str:
    """Return the JWT subject Coder uses for a chat."""
    return f"coder:chat:{chat_id}"


def coder_session_key(chat_id: str) -> str:
    """Return the name whose UUIDv5 is the chat's Tachograph session id."""
    return f"coder:{chat_id}"


def coder_to_event(req: CoderRequest) -> LifecycleEvent:
    """Map a verified Coder request to a LifecycleEvent (unknown types kept as-is)."""
    event = EVENT_NAMES.get(req.type, req.type)
    data = dict(req.data)
    tool_error = data.pop("tool_error", None)
    if req.type == "post_tool_use" and tool_error is not None:
        event = "PostToolUseFailure"
    mapped, detail = split_fields(data, _DATA_FIELDS)
    if isinstance(tool_error, str):
        mapped["error"] = tool_error
    elif tool_error is not None:
        detail["error"] = tool_error
    for key, value in req.meta.items():
        if key not in _META_FIELDS and value is not None:
            detail.setdefault(_META_DETAIL.get(key) or to_camel(key), value)
    return LifecycleEvent(
        event,
        event_id=req.dispatch_id,
        turn_id=req.turn_id or None,
        agent=AGENT,
        agent_session_id=req.chat_id,
        detail=detail,
        **mapped,
    )


def decision_to_coder(coder_type: str, decision: Decision) -> dict[str, Any]:
    """Map a combined decision to Coder's answer; `permission` only on mutable events."""
    answer: dict[str, Any] = {}
    outcome = decision.outcome
    if coder_type in MUTABLE_TYPES and outcome != "pass":
        answer.update(_permission_answer(coder_type, outcome, decision))
    context = decision.additional_context
    if isinstance(context, str) and context:
        answer["model_context"] = _truncate_utf8(context, MODEL_CONTEXT_MAX_BYTES)
    return answer


def _permission_answer(coder_type: str, outcome: object, decision: Decision) -> dict[str, Any]:
    """Build the allow-with-override or deny part of an answer to a mutable event."""
    replacement = decision.replacement
    if outcome == "modify" and coder_type == "user_prompt_submit" and isinstance(replacement, str):
        return {"permission": {"decision": "allow", "input_override": {"prompt": replacement}}}
    if outcome == "modify" and coder_type == "pre_tool_use" and isinstance(replacement, dict):
        return {"permission": {"decision": "allow", "input_override": replacement}}
    # deny, or anything this event cannot carry out as asked: the safe side is deny.
    reason = decision.reason
    reason = reason if isinstance(reason, str) and reason else DENY_REASON
    return {"permission": {"decision": "deny", "reason": reason}, "user_message": reason}


def _truncate_utf8(text: str, max_bytes: int) -> str:
    """Cut text to at most max_bytes of UTF-8 without splitting a character."""
    encoded = text.encode("utf-8")
    if len(encoded) <= max_bytes:
        return text
    return encoded[:max_bytes].decode("utf-8", errors="ignore")


def timeout_answer(coder_type: str) -> dict[str, Any]:
    """Answer for a dispatch not decided within half of Coder's timeout."""
    if coder_type in MUTABLE_TYPES:
        return decision_to_coder(coder_type, Decision("deny", TIMEOUT_REASON))
    return {}
