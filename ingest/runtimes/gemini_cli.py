"""Gemini CLI adapter (Gemini CLI 0.61): command-hook payloads to lifecycle events,
decisions to Gemini CLI's hook answers (§6.5).

Gemini CLI reads command hooks from `.gemini/settings.json` (Claude Code's nesting,
`timeout` in milliseconds) and writes Claude-like snake_case JSON to their stdin
(`session_id`, `transcript_path`, `cwd`, `hook_event_name`, `timestamp`, and the event's
own fields), under its own event names:

| Gemini CLI            | Tachograph                                                |
|-----------------------|-----------------------------------------------------------|
| SessionStart          | SessionStart                                              |
| BeforeAgent           | UserPromptSubmit                                          |
| BeforeTool            | PreToolUse                                                |
| AfterTool             | PostToolUse (PostToolUseFailure when `tool_response.error`)|
| AfterAgent            | Stop (`prompt_response` → last_assistant_message)         |
| Notification          | Notification                                              |
| SessionEnd            | SessionEnd                                                |
| PreCompress           | PreCompact: `manual` always; `auto` only as a model event |
| BeforeModel, AfterModel, BeforeToolSelection | not recorded (model events)       |

Model events. BeforeModel, AfterModel and BeforeToolSelection fire around every model
call and carry the whole request (and response); 0.61.0 also fires PreCompress with
`trigger: "auto"` before every model call, ahead of its own threshold check, so it does
not mean that anything was compacted. By default none of them is recorded: `to_event`
returns None and the hook is answered `{}`. With TACHOGRAPH_GEMINI_MODEL_EVENTS=store
they are stored as observational events (PreCompress as PreCompact), with the model name
but without `llm_request`/`llm_response`.

Ids. Gemini CLI sends no tool-call id, no turn id and no event id (its BeforeTool and
AfterTool payloads hold the tool's name and arguments only; the model's functionCall id
is not passed on). So tool_call_id and turn_id stay None, and no event gets an event_id:
nothing a Gemini payload holds names one occurrence uniquely (two identical `ls` calls
send identical payloads), and collapsing two real events into one stored decision would
lose the second. A PostToolUse is therefore not paired with its PreToolUse by id.

Answers (verified against the 0.61.0 bundle, packages/core hooks/types.js and
coreToolHookTriggers.js): `{"decision": "deny", "reason"}` blocks a tool (the model gets
`Tool execution blocked: <reason>`) or a prompt; on AfterAgent (`"block"`) it is "do not
stop yet": Gemini CLI sends the reason back as the next user message (with
`stop_hook_active`), which is Tachograph's Stop `continue`. A BeforeTool rewrite is
`hookSpecificOutput.tool_input`, which Gemini CLI builds the tool from as the whole
argument object (not merged), so the replacement sent is the complete input.
`hookSpecificOutput.additionalContext` is read on SessionStart, BeforeAgent and AfterTool
only.

Stdlib only: the command-hook client imports it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any, Final

from domain import lifecycle_events
from domain.hook_dispatch import Decision
from domain.lifecycle import LifecycleEvent
from domain.lifecycle_events import (
    POST_COMPACT,
    STOP_FAILURE,
    SUBAGENT_START,
    SUBAGENT_STOP,
    without,
)
from ingest.runtimes.claude_code import HookPayloadError, optional_text, split_fields

AGENT: Final = "gemini-cli"

# Gemini CLI's event -> Tachograph's normalised event.
EVENT_NAMES: Final[Mapping[str, str]] = {
    "SessionStart": "SessionStart",
    "BeforeAgent": "UserPromptSubmit",
    "BeforeTool": "PreToolUse",
    "AfterTool": "PostToolUse",
    "AfterAgent": "Stop",
    "Notification": "Notification",
    "SessionEnd": "SessionEnd",
    "PreCompress": "PreCompact",
}
GEMINI_NAMES: Final[Mapping[str, str]] = {v: k for k, v in EVENT_NAMES.items()}
# Fired around every model call; recorded only with TACHOGRAPH_GEMINI_MODEL_EVENTS=store.
MODEL_EVENTS: Final[tuple[str, ...]] = ("BeforeModel", "BeforeToolSelection", "AfterModel")
MODEL_EVENTS_DROP: Final = "drop"
MODEL_EVENTS_STORE: Final = "store"
MODEL_EVENTS_MODES: Final[tuple[str, ...]] = (MODEL_EVENTS_DROP, MODEL_EVENTS_STORE)

# The Gemini CLI events `tachograph hook install gemini` registers by default, and with
# the model events (PreCompress among them: its `auto` firing is one per model call).
INSTALLED_EVENTS: Final[tuple[str, ...]] = (
    "SessionStart",
    "BeforeAgent",
    "BeforeTool",
    "AfterTool",
    "AfterAgent",
    "Notification",
    "SessionEnd",
)
INSTALLED_MODEL_EVENTS: Final[tuple[str, ...]] = ("PreCompress", *MODEL_EVENTS)
# The normalised events a Gemini CLI hook produces (Runtime.normalised_events).
NORMALISED_EVENTS: Final = without(SUBAGENT_START, SUBAGENT_STOP, STOP_FAILURE, POST_COMPACT)
# What a fail-closed command hook denies when Tachograph cannot be reached (normalised),
# and the same as Gemini CLI names the events (for the hook file).
FAIL_CLOSED_EVENTS: Final = lifecycle_events.GATE_EVENTS.intersection(NORMALISED_EVENTS)
GATE_EVENTS: Final = frozenset(GEMINI_NAMES[e] for e in FAIL_CLOSED_EVENTS)

DENY_REASON: Final = "Denied by Tachograph policy."
CONTINUE_REASON: Final = "Tachograph policy asks to keep working before stopping."
DECISION_OUTCOMES: Final = frozenset({"pass", "deny", "modify", "continue"})
# Where Gemini CLI reads hookSpecificOutput.additionalContext (normalised names).
_CONTEXT_EVENTS: Final = frozenset({"SessionStart", "UserPromptSubmit", "PostToolUse"})
# Where `{"decision": "deny", "reason"}` is obeyed (normalised names).
_DECISION_EVENTS: Final = frozenset({"UserPromptSubmit", "PreToolUse", "Stop"})

_MAPPED_FIELDS: Final[Mapping[str, tuple[str, type]]] = {
    "session_id": ("agent_session_id", str),
    "tool_name": ("tool_name", str),
    "tool_input": ("tool_input", dict),
    "tool_response": ("tool_response", object),
    "prompt": ("prompt", str),
    "cwd": ("cwd", str),
}
# Only AfterAgent's `prompt_response` is the agent's final message.
_STOP_FIELDS: Final[Mapping[str, tuple[str, type]]] = {
    **_MAPPED_FIELDS,
    "prompt_response": ("last_assistant_message", str),
}
# The whole model request and response: not needed by anything Tachograph records.
_DROPPED_FIELDS: Final = frozenset({"llm_request", "llm_response"})


def gemini_payload_to_event(
    payload: object, event: str | None = None, *, model_events: str = MODEL_EVENTS_DROP
) -> LifecycleEvent | None:
    """Map Gemini CLI's hook JSON to a LifecycleEvent; None for an event not recorded.

    `event` (the command hook's argument, a Gemini CLI or a normalised name) wins over
    the payload's `hook_event_name`. Never fails on field content.
    """
    if not isinstance(payload, dict):
        raise HookPayloadError("a Gemini CLI hook body must be a JSON object")
    native = event or payload.get("hook_event_name")
    if not isinstance(native, str) or not native:
        raise HookPayloadError("a Gemini CLI hook body needs a non-empty hook_event_name")
    store_model = model_events == MODEL_EVENTS_STORE
    if native in MODEL_EVENTS and not store_model:
        return None
    if native == "PreCompress" and payload.get("trigger") != "manual" and not store_model:
        return None
    name = EVENT_NAMES.get(native, native)  # unknown (and normalised) names as they are
    body = {k: v for k, v in payload.items() if k != "hook_event_name" and k not in _DROPPED_FIELDS}
    mapped, detail = split_fields(body, _STOP_FIELDS if name == "Stop" else _MAPPED_FIELDS)
    model = _model_of(payload)
    if model is not None:
        mapped["model"] = model
    if name == "UserPromptSubmit" and isinstance(mapped.get("prompt"), str):
        mapped["prompt"] = _without_hook_context(mapped["prompt"])
    if name == "PostToolUse":
        error = _tool_error(mapped.get("tool_response"))
        if error is not None:
            name = "PostToolUseFailure"
            mapped["error"] = error
    # No event_id: see the module docstring (nothing in a payload is unique).
    return LifecycleEvent(name, agent=AGENT, detail=detail, **mapped)


_HOOK_CONTEXT: Final = re.compile(r"\A\s*<hook_context>.*?</hook_context>\s*", re.DOTALL)


def _without_hook_context(prompt: str) -> str:
    """The user's prompt without the SessionStart context Gemini CLI 0.61 puts before it in
    `-p` mode (`<hook_context>…</hook_context>`): that text is a hook's, not the user's, and
    would otherwise title the session."""
    stripped = _HOOK_CONTEXT.sub("", prompt, count=1)
    return stripped if stripped else prompt


def _model_of(payload: Mapping[str, Any]) -> str | None:
    """The model a model event names (`llm_request.model`), if any."""
    request = payload.get("llm_request")
    model = request.get("model") if isinstance(request, dict) else None
    return model if isinstance(model, str) and model else None


def _tool_error(response: object) -> str | None:
    """A failed tool's error message (`tool_response.error.message`), else None."""
    if not isinstance(response, dict):
        return None
    error = response.get("error")
    if isinstance(error, dict):
        message = error.get("message")
        return message if isinstance(message, str) and message else "tool error"
    if isinstance(error, str) and error:
        return error
    return None


def decision_to_gemini(event: str, decision: Decision) -> tuple[dict[str, Any], str | None]:
    """Map a combined decision on a (normalised) event to Gemini CLI's hook answer, plus an
    audit note when the answer is degraded."""
    outcome: object = decision.outcome
    notes: list[str] = []
    if not isinstance(outcome, str) or outcome not in DECISION_OUTCOMES:
        notes.append(f"unknown outcome {outcome!r} treated as deny")
        outcome = "deny"
    reason = optional_text(decision.reason)
    context = optional_text(decision.additional_context)
    answer: dict[str, Any]
    if outcome == "pass":
        answer = {}
    elif event not in _DECISION_EVENTS:
        notes.append(f"{event} has no decision control in Gemini CLI; {outcome} answered as pass")
        answer = {}
    elif event == "PreToolUse":
        answer = _before_tool(outcome, reason, decision.replacement, notes)
    elif event == "UserPromptSubmit":
        answer = _before_agent(outcome, reason, decision.replacement, notes)
    else:  # Stop
        if outcome == "modify":
            notes.append("Stop modify is not an outcome of this event; answered as continue")
        # `continue`, and a closed failure's `deny` ("the turn may not complete", §6.2):
        # AfterAgent's deny makes Gemini CLI keep working with the reason as its prompt.
        # (Gemini CLI reads "block" and "deny" alike; "block" is its word for this.)
        answer = {"decision": "block", "reason": reason or CONTINUE_REASON}
    _add_context(event, answer, context, notes)
    return answer, "; ".join(notes) or None


def _before_tool(
    outcome: str, reason: str | None, replacement: object, notes: list[str]
) -> dict[str, Any]:
    if outcome == "modify" and isinstance(replacement, dict):
        # Gemini CLI builds the tool from this object alone: it is the complete input.
        output = {"hookEventName": "BeforeTool", "tool_input": replacement}
        return {"hookSpecificOutput": output}
    if outcome == "modify":
        notes.append("PreToolUse modify without a JSON object replacement answered as deny")
    elif outcome == "continue":
        notes.append("PreToolUse continue is not an outcome of this event; answered as deny")
    return {"decision": "deny", "reason": reason or DENY_REASON}


def _before_agent(
    outcome: str, reason: str | None, replacement: object, notes: list[str]
) -> dict[str, Any]:
    if outcome == "modify":
        # Gemini CLI can add context to a prompt but not replace it: deny is the safe
        # side, and the replacement travels in the reason so the user can act on it.
        notes.append(
            "UserPromptSubmit modify is not expressible in Gemini CLI; "
            "answered deny with the replacement in the reason"
        )
        text = replacement if isinstance(replacement, str) else json.dumps(replacement)
        lead = f"{reason}\n\n" if reason else ""
        return {
            "decision": "deny",
            "reason": f"{lead}Tachograph policy rewrote this prompt, which Gemini CLI "
            f"cannot apply, so it was blocked. Replacement prompt:\n{text}",
        }
    if outcome == "continue":
        notes.append("UserPromptSubmit continue is not an outcome of this event; answered deny")
    return {"decision": "deny", "reason": reason or DENY_REASON}


def _add_context(event: str, answer: dict[str, Any], context: str | None, notes: list[str]) -> None:
    """Place additionalContext where Gemini CLI reads it, or record that it was dropped."""
    if not context:
        return
    if event in _CONTEXT_EVENTS and "decision" not in answer:
        output = answer.setdefault("hookSpecificOutput", {"hookEventName": GEMINI_NAMES[event]})
        output["additionalContext"] = context
    elif "decision" in answer:
        # The reason reaches the model (or, for a prompt, the user): so does the context.
        answer["reason"] = f"{answer['reason']}\n\n{context}"
    else:
        notes.append(f"additionalContext dropped: Gemini CLI does not read it on {event}")
