"""Claude Code adapter: hook payloads to lifecycle events, decisions to hook answers (§6.5).

Stdlib only (and the stdlib-only domain.lifecycle): the command-hook client
(`hook_client.command`) imports this module and must stay lean, so nothing here may
import fastapi, httpx, pydantic or eventsourcing.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Final

from domain import lifecycle_events
from domain.casing import to_camel
from domain.hook_dispatch import Decision
from domain.lifecycle import LifecycleEvent

AGENT: Final = "claude-code"

NORMALISED_EVENTS: Final = lifecycle_events.NORMALISED_EVENTS

# Events Claude Code 2.1.328 also fires (tests/fixtures/SOURCES.md): PermissionRequest, its
# permission dialog, and PostToolBatch and MessageDisplay, which only report. Their
# handlers are observational (§6.5); `hook install claude` registers them beside the
# normalised set so the log holds them, and so a fail-closed install can gate the dialog.
OBSERVATIONAL_EVENTS: Final[tuple[str, ...]] = (
    "PermissionRequest",
    "PostToolBatch",
    "MessageDisplay",
)
INSTALLED_EVENTS: Final[tuple[str, ...]] = (*NORMALISED_EVENTS, *OBSERVATIONAL_EVENTS)

# §6.1: the events whose handlers may change the agent's course (closed by default).
GATE_EVENTS: Final = lifecycle_events.GATE_EVENTS
# What a fail-closed command hook denies when Tachograph cannot be reached: the gates, and
# the permission dialog (answered `decision.behavior: "deny"`).
FAIL_CLOSED_EVENTS: Final = GATE_EVENTS | {lifecycle_events.PERMISSION_REQUEST}

DECISION_OUTCOMES: Final = frozenset({"pass", "deny", "modify", "continue"})
DENY_REASON: Final = "Denied by Tachograph policy."

_TOOL_EVENTS: Final = lifecycle_events.TOOL_EVENTS

# Claude Code reads hookSpecificOutput.additionalContext only on these events (hooks
# reference, per-event "decision control"); elsewhere it is not part of the answer schema.
_CONTEXT_EVENTS: Final = frozenset(
    {
        "SessionStart",
        "UserPromptSubmit",
        "PreToolUse",
        "PostToolUse",
        "PostToolUseFailure",
        "SubagentStart",
        "Notification",
    }
)

# Events whose answer is the top-level {"decision": "block", "reason": ...}.
_BLOCK_EVENTS: Final = frozenset(
    {"UserPromptSubmit", "PostToolUse", "PostToolUseFailure", "Stop", "SubagentStop", "PreCompact"}
)

# On these, "block" means "do not stop yet": Tachograph's `continue` (and a closed-failure
# `deny`, "the turn may not complete", §6.2) are expressed exactly.
_CONTINUE_EVENTS: Final = frozenset({"Stop", "SubagentStop"})

# Claude field -> (LifecycleEvent field, accepted type). A value of another type is not
# trusted in a typed field; it is kept in `detail` instead, so nothing is lost or fails.
MAPPED_FIELDS: Final[Mapping[str, tuple[str, type]]] = {
    "session_id": ("agent_session_id", str),
    "prompt_id": ("turn_id", str),
    "tool_name": ("tool_name", str),
    "tool_use_id": ("tool_call_id", str),
    "tool_input": ("tool_input", dict),
    "tool_response": ("tool_response", object),
    "prompt": ("prompt", str),
    "last_assistant_message": ("last_assistant_message", str),
    "agent_id": ("subagent_id", str),
    "model": ("model", str),
    "cwd": ("cwd", str),
    "permission_mode": ("permission_mode", str),
    "agent_type": ("agent_type", str),
    "duration_ms": ("duration_ms", int),
    "error": ("error", str),
    "is_interrupt": ("is_interrupt", bool),
}


class HookPayloadError(ValueError):
    """A hook body is not the runtime's hook payload (not an object, no event name)."""


class ClaudePayloadError(HookPayloadError):
    """The request body is not a Claude Code hook payload (not an object, no event name)."""


def split_fields(
    source: Mapping[str, Any], table: Mapping[str, tuple[str, type]]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Split runtime fields into typed event fields (per `table`) and camelCased detail.

    `detail` is camelCased because it reaches managed handlers as §6.2's `detail`.
    """
    mapped: dict[str, Any] = {}
    detail: dict[str, Any] = {}
    for key, value in source.items():
        target = table.get(key)
        if target is not None and _accepts(value, target[1]):
            mapped[target[0]] = value
        else:
            # First writer wins when `foo_bar` and `fooBar` both arrive.
            detail.setdefault(to_camel(key), value)
    return mapped, detail


def _accepts(value: object, kind: type) -> bool:
    """Whether `value` may fill a typed field of `kind` (a count is a non-negative int,
    not a bool; anything else stays in `detail`)."""
    if kind is int:
        return type(value) is int and value >= 0
    return value is not None and isinstance(value, kind)


def claude_payload_to_event(payload: object) -> LifecycleEvent:
    """Map Claude Code's hook JSON to a LifecycleEvent; never fails on field content."""
    if not isinstance(payload, dict):
        raise ClaudePayloadError("a Claude Code hook body must be a JSON object")
    event = payload.get("hook_event_name")
    if not isinstance(event, str) or not event:
        raise ClaudePayloadError("a Claude Code hook body needs a non-empty hook_event_name")
    body = {k: v for k, v in payload.items() if k != "hook_event_name"}
    mapped, detail = split_fields(body, MAPPED_FIELDS)
    return LifecycleEvent(
        event,
        event_id=_event_id(event, mapped),
        agent=AGENT,
        detail=detail,
        **mapped,
    )


def _event_id(event: str, mapped: Mapping[str, Any]) -> str | None:
    """Return an idempotency key only for events Claude Code identifies uniquely."""
    # Claude Code sends no event id. A tool call's tool_use_id is issued by the model API and
    # is unique, and each tool event fires once per call, so (session, event, tool_use_id)
    # names exactly one real event: a redelivery of it (a client retry, the same hook
    # configured twice) gets the stored decision instead of a second dispatch. No other
    # event carries anything unique: two identical Stop payloads can be two real stops
    # (after a `continue`), so they get no eventId and are never collapsed. (A deferred call
    # resumed with `claude -p --resume` asks PreToolUse again under the same id; Tachograph
    # never defers, so answering with the stored decision is right there too.)
    return tool_event_id(AGENT, event, mapped, _TOOL_EVENTS)


def tool_event_id(
    agent: str, event: str, mapped: Mapping[str, Any], tool_events: frozenset[str]
) -> str | None:
    """(agent, session, event, tool call id) for a tool event with an id, else None."""
    tool_call_id = mapped.get("tool_call_id")
    if event not in tool_events or not tool_call_id:
        return None
    return f"{agent}:{mapped.get('agent_session_id', '')}:{event}:{tool_call_id}"


def decision_to_claude(event: str, decision: Decision) -> tuple[dict[str, Any], str | None]:
    """Map a combined decision to Claude Code's hook answer, plus an audit note if degraded."""
    notes: list[str] = []
    outcome = known_outcome(decision, notes)
    reason = optional_text(decision.reason)
    replacement = decision.replacement
    if event == "PreToolUse":
        answer = _pre_tool_use_answer(outcome, reason, replacement, notes)
    elif event == "PermissionRequest" and outcome == "pass" and decision.approved:
        # An operator allowed the call (an approval): answer the dialog for them.
        allowed = {"behavior": "allow"}
        answer = {"hookSpecificOutput": {"hookEventName": event, "decision": allowed}}
    elif outcome == "pass":
        answer = {}
    elif event == "PermissionRequest":
        # Only a fail-closed hook denies here (PermissionRequest is observational to
        # handlers): the permission dialog's own answer, never an allow.
        decision_ = {"behavior": "deny", "message": reason or DENY_REASON}
        answer = {"hookSpecificOutput": {"hookEventName": event, "decision": decision_}}
    elif event in _BLOCK_EVENTS:
        answer = _block_answer(event, outcome, reason, replacement, notes)
    elif event == "SubagentStart":
        answer = _stop_claude_answer(event, outcome, reason, replacement, notes)
    else:
        notes.append(f"{event} has no decision control in Claude Code; {outcome} answered as pass")
        answer = {}
    _add_context(event, answer, optional_text(decision.additional_context), notes)
    return answer, "; ".join(notes) or None


def known_outcome(decision: Decision, notes: list[str]) -> str:
    """The decision's outcome; one no renderer knows is a deny, and noted so."""
    outcome: object = decision.outcome
    if not isinstance(outcome, str) or outcome not in DECISION_OUTCOMES:
        notes.append(f"unknown outcome {outcome!r} treated as deny")
        return "deny"
    return outcome


def _pre_tool_use_answer(
    outcome: str, reason: str | None, replacement: object, notes: list[str]
) -> dict[str, Any]:
    """Build a PreToolUse answer: permissionDecision deny, or allow with updatedInput."""
    if outcome == "pass":
        return {}
    output: dict[str, Any] = {"hookEventName": "PreToolUse"}
    if outcome == "modify" and isinstance(replacement, dict):
        output["permissionDecision"] = "allow"
        output["updatedInput"] = replacement
        if reason:
            output["permissionDecisionReason"] = reason
        return {"hookSpecificOutput": output}
    if outcome == "modify":
        notes.append("PreToolUse modify without a JSON object replacement answered as deny")
    elif outcome == "continue":
        notes.append("PreToolUse continue is not an outcome of this event; answered as deny")
    output["permissionDecision"] = "deny"
    output["permissionDecisionReason"] = reason or DENY_REASON
    return {"hookSpecificOutput": output}


def _block_answer(
    event: str, outcome: str, reason: str | None, replacement: object, notes: list[str]
) -> dict[str, Any]:
    """Build a top-level block answer (prompt rejected, feedback, or keep working)."""
    if outcome == "modify":
        # No rewrite field exists on these events: blocking is the safe side, and the
        # replacement travels in the reason so the user (or Claude) can act on it.
        notes.append(
            f"{event} modify is not expressible in Claude Code; "
            "answered block with the replacement in the reason"
        )
        return {"decision": "block", "reason": _rewrite_reason(event, reason, replacement)}
    if outcome == "continue" and event not in _CONTINUE_EVENTS:
        notes.append(f"{event} continue is not an outcome of this event; answered as block")
    if event in _CONTINUE_EVENTS:
        default = "Tachograph policy asks to keep working before stopping."
    else:
        default = "Blocked by Tachograph policy."
    return {"decision": "block", "reason": reason or default}


def _stop_claude_answer(
    event: str, outcome: str, reason: str | None, replacement: object, notes: list[str]
) -> dict[str, Any]:
    """Stop Claude entirely: the only enforcement an event without decision control has."""
    # SubagentStart cannot block subagent creation; the universal `continue: false` is the
    # only answer that still keeps the denied (or un-rewritable) subagent from working.
    notes.append(
        f"{event} {outcome} is not expressible in Claude Code; answered continue=false "
        "(stops Claude) with the reason in stopReason"
    )
    if outcome == "modify":
        stop_reason = _rewrite_reason(event, reason, replacement)
    else:
        stop_reason = reason or "Stopped by Tachograph policy."
    return {"continue": False, "stopReason": stop_reason}


def _rewrite_reason(event: str, reason: str | None, replacement: object) -> str:
    """Explain a rewrite Claude Code cannot apply, carrying the replacement text."""
    text = replacement if isinstance(replacement, str) else json.dumps(replacement)
    what = "prompt" if event == "UserPromptSubmit" else "input"
    lead = f"{reason}\n\n" if reason else ""
    return (
        f"{lead}Tachograph policy rewrote this {what}, which Claude Code cannot apply here, "
        f"so it was blocked. Replacement {what}:\n{text}"
    )


def _add_context(event: str, answer: dict[str, Any], context: str | None, notes: list[str]) -> None:
    """Place additionalContext where this event accepts it, or record that it was dropped."""
    if not context:
        return
    if event in _CONTEXT_EVENTS:
        output = answer.setdefault("hookSpecificOutput", {"hookEventName": event})
        output["additionalContext"] = context
    elif answer.get("decision") == "block":
        # The block reason is shown to Claude, so the context still reaches it.
        answer["reason"] = f"{answer['reason']}\n\n{context}"
    else:
        notes.append(f"additionalContext dropped: Claude Code does not accept it on {event}")


def with_session_title(answer: dict[str, Any], title: str) -> dict[str, Any]:
    """A SessionStart answer that also sets Claude Code's session title (2.1.328 reads
    `hookSpecificOutput.sessionTitle` there), so the agent's own UI names the session as
    its operator did."""
    output = {"hookEventName": "SessionStart", **answer.get("hookSpecificOutput", {})}
    return {**answer, "hookSpecificOutput": {**output, "sessionTitle": title}}


def optional_text(value: object) -> str | None:
    """Return a decision text field as a string, or None when absent or empty."""
    if value is None or value == "":
        return None
    return value if isinstance(value, str) else json.dumps(value)
