"""Copilot CLI adapter (Copilot CLI 1.0.102): hook payloads to lifecycle events, decisions
to Copilot's hook answers (§6.5).

Copilot reads hooks from `$COPILOT_HOME/hooks/*.json` (`{"version": 1, "hooks": {...}}`),
as command hooks (`tachograph hook copilot <event>`) or native HTTP hooks
(`POST /hooks/copilot/<event>`). Two payload families reach them, chosen by the name the
hook is registered under (tests/fixtures/copilot/, tests/fixtures/SOURCES.md):

- camelCase names (`preToolUse`, `agentStop`, ...) get Copilot's own payload: `sessionId`,
  `toolName`, `toolArgs` (an object, or for `apply_patch` the patch string), `toolResult`,
  an epoch-ms `timestamp`. It does not name its event: the registration does.
- PascalCase names (`PreToolUse`, `Stop`, ...) get a Claude-style payload: `hook_event_name`,
  `session_id`, `tool_name` (Claude's tool names: `Bash`, `Edit`), `tool_input`, an ISO
  `timestamp`. (`PermissionRequest` still gets the camelCase payload, with `hookName`.)

Both families map to the same events; the names of the observational ones are unified as
PascalCase (`permissionRequest` and `PermissionRequest` are both `PermissionRequest`).

Answers are Copilot's own flat format for both families, as verified against the binary:
PascalCase registrations read it too (a `hookSpecificOutput.permissionDecision` is read as
well, but a `hookSpecificOutput.additionalContext` is ignored). Copilot reads:
`permissionDecision`/`permissionDecisionReason`/`modifiedArgs`/`additionalContext` on
preToolUse, `decision: "block"`/`reason`/`modifiedPrompt`/`additionalContext` on
userPromptSubmitted, `decision: "block"`/`reason` on agentStop (the reason becomes the next
user message; Copilot caps this at 8 in a row), `additionalContext` on sessionStart,
postToolUse, postToolUseFailure and subagentStart, and `behavior`/`message` on
permissionRequest. Payloads carry no tool-call id, so no event gets an eventId.

Stdlib only: the command-hook client imports it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Final

from domain.hook_dispatch import Decision
from domain.lifecycle import LifecycleEvent
from domain.lifecycle_events import (
    GATE_EVENTS,
    NOTIFICATION,
    PERMISSION_REQUEST,
    POST_COMPACT,
    STOP_FAILURE,
    without,
)
from ingest.runtimes.claude_code import DENY_REASON, HookPayloadError, optional_text, split_fields
from ingest.runtimes.patches import PATCH_TOOL, patch_input, patch_of

AGENT: Final = "copilot-cli"

# Copilot's camelCase event names -> Tachograph's. PascalCase registrations already use the
# normalised names (and `Stop` for agentStop); observational events are named in PascalCase
# whichever family they came from.
_EVENT_NAMES: Final[Mapping[str, str]] = {
    "sessionStart": "SessionStart",
    "userPromptSubmitted": "UserPromptSubmit",
    "userPromptTransformed": "UserPromptTransformed",
    "preToolUse": "PreToolUse",
    "permissionRequest": "PermissionRequest",
    "postToolUse": "PostToolUse",
    "postToolUseFailure": "PostToolUseFailure",
    "subagentStart": "SubagentStart",
    "subagentStop": "SubagentStop",
    "preCompact": "PreCompact",
    "agentStop": "Stop",
    "errorOccurred": "ErrorOccurred",
    "sessionEnd": "SessionEnd",
    "notification": "Notification",
    "preMcpToolCall": "PreMcpToolCall",
    "UserPromptSubmitted": "UserPromptSubmit",
    "AgentStop": "Stop",
}

# The normalised events this adapter produces.
NORMALISED_EVENTS: Final = without(STOP_FAILURE, POST_COMPACT, NOTIFICATION)
# The camelCase names `tachograph hook install copilot` registers (Copilot's own payload).
REGISTERED_EVENTS: Final[tuple[str, ...]] = (
    "sessionStart",
    "userPromptSubmitted",
    "preToolUse",
    "permissionRequest",
    "postToolUse",
    "postToolUseFailure",
    "subagentStart",
    "subagentStop",
    "preCompact",
    "agentStop",
    "errorOccurred",
    "sessionEnd",
)
# What a fail-closed command hook denies when Tachograph cannot be reached (normalised).
FAIL_CLOSED_EVENTS: Final = GATE_EVENTS | {PERMISSION_REQUEST}
# The same, as the registrations name them.
REGISTERED_GATE_EVENTS: Final = frozenset(
    name for name in REGISTERED_EVENTS if _EVENT_NAMES[name] in FAIL_CLOSED_EVENTS
)

DECISION_OUTCOMES: Final = frozenset({"pass", "deny", "modify", "continue"})
_CONTEXT_EVENTS: Final = frozenset(
    {"SessionStart", "UserPromptSubmit", "PreToolUse", "PostToolUse", "PostToolUseFailure"}
)

# Both families' fields -> (LifecycleEvent field, accepted type); the rest goes to detail.
_MAPPED_FIELDS: Final[Mapping[str, tuple[str, type]]] = {
    "sessionId": ("agent_session_id", str),
    "session_id": ("agent_session_id", str),
    "toolName": ("tool_name", str),
    "tool_name": ("tool_name", str),
    "toolCallId": ("tool_call_id", str),
    "tool_call_id": ("tool_call_id", str),
    "tool_use_id": ("tool_call_id", str),
    "toolResult": ("tool_response", object),
    "tool_result": ("tool_response", object),
    "tool_response": ("tool_response", object),
    "prompt": ("prompt", str),
    "agentId": ("subagent_id", str),
    "agent_id": ("subagent_id", str),
    "agentType": ("agent_type", str),
    "agent_type": ("agent_type", str),
    "model": ("model", str),
    "cwd": ("cwd", str),
    "error": ("error", str),
    "last_assistant_message": ("last_assistant_message", str),
}
# Tool inputs: camelCase `toolArgs` (and permissionRequest's `toolInput`), Claude's
# `tool_input`. An object is the input; a string is apply_patch's patch.
_TOOL_INPUT_FIELDS: Final = ("toolArgs", "toolInput", "tool_input")
_PATCH_START: Final = "*** Begin Patch"


def copilot_payload_to_event(payload: object, event: str | None = None) -> LifecycleEvent:
    """Map a Copilot CLI hook payload (either family) to a LifecycleEvent.

    `event` (the hook's registration: the route's or the command hook's argument) wins over
    the payload's `hook_event_name` or `hookName`. Never fails on field content.
    """
    if not isinstance(payload, dict):
        raise HookPayloadError("a Copilot CLI hook body must be a JSON object")
    name = event or payload.get("hook_event_name") or payload.get("hookName")
    if not isinstance(name, str) or not name:
        raise HookPayloadError(
            "a Copilot CLI hook needs its event: register it as /hooks/copilot/<event> "
            "(or `tachograph hook copilot <event>`)"
        )
    normalised = _EVENT_NAMES.get(name, name)
    body = {
        k: v
        for k, v in payload.items()
        if k not in ("hook_event_name", "hookName") and k not in _TOOL_INPUT_FIELDS
    }
    mapped, detail = split_fields(body, _MAPPED_FIELDS)
    tool_input, raw_input = _tool_input(payload, mapped.get("tool_name"))
    if tool_input is not None:
        mapped["tool_input"] = tool_input
    elif raw_input is not None:
        detail.setdefault("toolArgs", raw_input)
    error = payload.get("error")
    if "error" not in mapped and isinstance(error, dict) and isinstance(error.get("message"), str):
        # errorOccurred: {message, name, stack}; the message is the error, the stack is noise.
        mapped["error"] = error["message"]
        detail.pop("error", None)
    if normalised in ("SubagentStart", "SubagentStop") and "subagent_id" not in mapped:
        agent_name = payload.get("agentName") or payload.get("agent_name")
        if isinstance(agent_name, str) and agent_name:
            mapped["subagent_id"] = agent_name
    last = payload.get("response") if normalised == "SubagentStop" else None
    if normalised == "SessionEnd":
        last = payload.get("finalMessage") or payload.get("final_message")
    if isinstance(last, str) and "last_assistant_message" not in mapped:
        mapped["last_assistant_message"] = last
    # No event id: Copilot sends no tool-call id, and nothing else names an event uniquely.
    return LifecycleEvent(normalised, agent=AGENT, detail=detail, **mapped)


def _tool_input(payload: Mapping[str, Any], tool_name: object) -> tuple[Any, Any]:
    """The recorded tool input, and the raw one when it cannot be recorded as an input."""
    raw = next((payload[k] for k in _TOOL_INPUT_FIELDS if k in payload), None)
    if isinstance(raw, dict):
        if tool_name == PATCH_TOOL:
            patch = patch_of(raw)
            if patch is not None:
                return patch_input(patch), None
        return raw, None
    if isinstance(raw, str) and (tool_name == PATCH_TOOL or raw.lstrip().startswith(_PATCH_START)):
        # Copilot's apply_patch (`Edit` in PascalCase payloads) sends the patch itself.
        return patch_input(raw), None
    return None, raw


def decision_to_copilot(event: str, decision: Decision) -> tuple[dict[str, Any], str | None]:
    """Map a combined decision to Copilot's hook answer, plus an audit note if degraded."""
    outcome: object = decision.outcome
    notes: list[str] = []
    if not isinstance(outcome, str) or outcome not in DECISION_OUTCOMES:
        notes.append(f"unknown outcome {outcome!r} treated as deny")
        outcome = "deny"
    reason = optional_text(decision.reason)
    context = optional_text(decision.additional_context)
    replacement = decision.replacement
    answer: dict[str, Any]
    if event == "PreToolUse":
        answer = _pre_tool_use(outcome, reason, replacement, notes)
    elif event == "PermissionRequest" and outcome == "pass" and decision.approved:
        answer = {"behavior": "allow"}  # an operator allowed the call (an approval)
    elif outcome == "pass":
        answer = {}
    elif event == "PermissionRequest":
        # Only a fail-closed hook denies here (handlers only observe it): never an allow.
        answer = {"behavior": "deny", "message": reason or DENY_REASON}
    elif event == "UserPromptSubmit":
        answer = _prompt(outcome, reason, replacement, notes)
    elif event == "Stop":
        if outcome not in ("continue", "deny"):
            notes.append(f"Stop {outcome} is not an outcome of this event; answered as block")
        default = "Tachograph policy asks to keep working before stopping."
        answer = {"decision": "block", "reason": reason or default}
    elif event == "SubagentStart":
        # Copilot cannot refuse or rewrite a subagent; the only answer that reaches it is
        # context prepended to its prompt, so the decision travels there.
        notes.append(
            f"SubagentStart {outcome} is not expressible in Copilot CLI; "
            "answered with the decision as additionalContext for the subagent"
        )
        answer = {"additionalContext": _subagent_notice(outcome, reason, replacement)}
    else:
        notes.append(f"{event} has no decision control in Copilot CLI; {outcome} answered as pass")
        answer = {}
    _add_context(event, answer, context, notes)
    return answer, "; ".join(notes) or None


def _pre_tool_use(
    outcome: str, reason: str | None, replacement: object, notes: list[str]
) -> dict[str, Any]:
    """preToolUse: pass is no decision (Copilot's own permission checks still apply)."""
    if outcome == "pass":
        return {}
    if outcome == "modify" and isinstance(replacement, dict):
        patch = replacement.get("patch")
        # apply_patch takes the patch string itself; an object would be sent as JSON text.
        args: object = patch if isinstance(patch, str) else replacement
        answer: dict[str, Any] = {"permissionDecision": "allow", "modifiedArgs": args}
        if reason:
            answer["permissionDecisionReason"] = reason
        return answer
    if outcome == "modify":
        notes.append("PreToolUse modify without a JSON object replacement answered as deny")
    elif outcome == "continue":
        notes.append("PreToolUse continue is not an outcome of this event; answered as deny")
    return {"permissionDecision": "deny", "permissionDecisionReason": reason or DENY_REASON}


def _prompt(
    outcome: str, reason: str | None, replacement: object, notes: list[str]
) -> dict[str, Any]:
    """userPromptSubmitted: block, or the rewritten prompt as modifiedPrompt."""
    if outcome == "modify" and isinstance(replacement, str) and replacement:
        return {"modifiedPrompt": replacement}
    if outcome == "modify":
        notes.append(
            "UserPromptSubmit modify without a non-empty string replacement answered as block"
        )
    elif outcome == "continue":
        notes.append("UserPromptSubmit continue is not an outcome of this event; answered as block")
    return {"decision": "block", "reason": reason or "Blocked by Tachograph policy."}


def _subagent_notice(outcome: str, reason: str | None, replacement: object) -> str:
    if outcome == "modify":
        text = replacement if isinstance(replacement, str) else json.dumps(replacement)
        lead = f"{reason}\n\n" if reason else ""
        return (
            f"{lead}Tachograph policy rewrote this subagent's task, which Copilot CLI cannot "
            f"apply. Do only this task instead:\n{text}"
        )
    return (
        f"Tachograph policy denied this subagent: {reason or DENY_REASON} "
        "Do not carry out the task; stop and report that it was denied."
    )


def _add_context(event: str, answer: dict[str, Any], context: str | None, notes: list[str]) -> None:
    """Place additionalContext where Copilot reads it, or record that it was dropped."""
    if not context:
        return
    if (event in _CONTEXT_EVENTS or event == "SubagentStart") and answer.get("decision") != "block":
        existing = answer.get("additionalContext")
        answer["additionalContext"] = f"{existing}\n\n{context}" if existing else context
        return
    if answer.get("decision") == "block":
        # The block reason reaches the model (Stop) or the user (a blocked prompt).
        answer["reason"] = f"{answer['reason']}\n\n{context}"
    else:
        notes.append(f"additionalContext dropped: Copilot CLI does not accept it on {event}")
