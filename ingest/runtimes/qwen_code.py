"""Qwen Code adapter (Qwen Code 0.24.4): hook payloads to lifecycle events, decisions to
Qwen Code's hook answers (§6.5).

Qwen Code reads command and HTTP hooks from `~/.qwen/settings.json` (Claude Code's
nesting, `timeout` in milliseconds) and sends Claude-Code-shaped payloads under Claude
Code's event names, with Gemini CLI's tool names (Qwen Code is a Gemini CLI fork). What
differs from Claude Code, as verified against the 0.24.4 binary:

- Tools are renamed to Claude Code's names (`run_shell_command` -> `Bash`, `write_file`
  -> `Write`, ...; their inputs already use Claude Code's fields), so policy rules,
  approvals and activity search treat a call the same whoever ran it. The native name
  stays in `detail.nativeToolName`.
- A tool event carries both Qwen Code's own `tool_use_id` and the model's
  `tool_call_id`; the model's id (the one PostToolBatch names too) is the call's id.
- UserPromptSubmit fires again before every tool-result continuation, without
  `submitted_prompt` and with an empty `prompt`: that is not a prompt, so it is not
  recorded (it would otherwise start a new turn); it is answered with no decision.
- PreToolUse `updatedInput` is ignored (only a permission dialog applies a rewrite, and
  none is shown in the runs Tachograph watches): a rewrite is answered as a deny whose
  reason carries the replacement, so the model can issue the rewritten call itself.
- `hookSpecificOutput.additionalContext` reaches the model on SessionStart,
  UserPromptSubmit and PostToolUse only (not PreToolUse).

Stdlib only: the command-hook client imports it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import replace
from typing import Any, Final

from domain import lifecycle_events
from domain.hook_dispatch import Decision
from domain.lifecycle import LifecycleEvent
from domain.lifecycle_events import (
    GATE_EVENTS,
    PERMISSION_REQUEST,
    PRE_TOOL_USE,
    TOOL_EVENTS,
    USER_PROMPT_SUBMIT,
)
from ingest.runtimes.claude_code import (
    MAPPED_FIELDS,
    HookPayloadError,
    decision_to_claude,
    optional_text,
    split_fields,
    tool_event_id,
)
from ingest.runtimes.claude_shaped import place_context, rename_tool

AGENT: Final = "qwen-code"

# Qwen Code fires every normalised event (and more, stored under their own names).
NORMALISED_EVENTS: Final = lifecycle_events.NORMALISED_EVENTS
# Its own events `hook install qwen` registers beside them (observational). Not
# MessageDisplay: it fires once per streamed chunk.
OBSERVATIONAL_EVENTS: Final = (PERMISSION_REQUEST, "PermissionDenied", "PostToolBatch")
INSTALLED_EVENTS: Final = (*NORMALISED_EVENTS, *OBSERVATIONAL_EVENTS)
# What a fail-closed command hook denies when Tachograph cannot be reached: the gates
# and the permission dialog (as for Claude Code).
FAIL_CLOSED_EVENTS: Final = GATE_EVENTS | {PERMISSION_REQUEST}

# Qwen Code's tool -> Claude Code's name for the same tool (same input fields).
TOOL_NAMES: Final[Mapping[str, str]] = {
    "run_shell_command": "Bash",
    "write_file": "Write",
    "edit": "Edit",
    "read_file": "Read",
    "glob": "Glob",
    "grep_search": "Grep",
    "list_directory": "LS",
    "web_fetch": "WebFetch",
    "web_search": "WebSearch",
    "todo_write": "TodoWrite",
    "task": "Task",
}

# Where Qwen Code 0.24.4 reads hookSpecificOutput.additionalContext.
_CONTEXT_EVENTS: Final = frozenset({"SessionStart", "UserPromptSubmit", "PostToolUse"})

# Claude Code's fields, the model's `tool_call_id` as the call's id (see the docstring).
_MAPPED_FIELDS: Final[Mapping[str, tuple[str, type]]] = {
    **{k: v for k, v in MAPPED_FIELDS.items() if k != "tool_use_id"},
    "tool_call_id": ("tool_call_id", str),
}


def qwen_payload_to_event(payload: object, event: str | None = None) -> LifecycleEvent | None:
    """Map Qwen Code's hook JSON to a LifecycleEvent; None for a prompt continuation.

    `event` (the command hook's argument) wins over the payload's `hook_event_name`.
    Never fails on field content.
    """
    if not isinstance(payload, dict):
        raise HookPayloadError("a Qwen Code hook body must be a JSON object")
    name = event or payload.get("hook_event_name")
    if not isinstance(name, str) or not name:
        raise HookPayloadError("a Qwen Code hook body needs a non-empty hook_event_name")
    if name == USER_PROMPT_SUBMIT and _is_continuation(payload):
        return None
    body = {k: v for k, v in payload.items() if k != "hook_event_name"}
    mapped, detail = split_fields(body, _MAPPED_FIELDS)
    rename_tool(mapped, detail, TOOL_NAMES)
    # As for Claude Code: only a tool event is named uniquely.
    event_id = tool_event_id(AGENT, name, mapped, TOOL_EVENTS)
    return LifecycleEvent(name, event_id=event_id, agent=AGENT, detail=detail, **mapped)


def _is_continuation(payload: Mapping[str, Any]) -> bool:
    """Whether a UserPromptSubmit is Qwen Code's refiring before a tool-result
    continuation rather than a prompt: it has no `submitted_prompt` and no prompt text."""
    prompt = payload.get("prompt")
    return "submitted_prompt" not in payload and not (isinstance(prompt, str) and prompt.strip())


def decision_to_qwen(event: str, decision: Decision) -> tuple[dict[str, Any], str | None]:
    """Qwen Code's hook answer (Claude Code's shapes), plus an audit note when degraded."""
    notes: list[str] = []
    context = optional_text(decision.additional_context)
    # The context is placed below, where Qwen Code (not Claude Code) reads it.
    bare = replace(decision, additional_context=None)
    if event == PRE_TOOL_USE and decision.outcome == "modify":
        answer = _unapplied_rewrite(decision.reason, decision.replacement)
        notes.append(
            "PreToolUse modify is not applied by Qwen Code 0.24.4 (it ignores updatedInput); "
            "answered deny with the replacement in the reason"
        )
    else:
        answer, note = decision_to_claude(event, bare)
        if note:
            notes.append(note)
    place_context(event, answer, context, notes, reads_context=_CONTEXT_EVENTS, runtime="Qwen Code")
    return answer, "; ".join(notes) or None


def _unapplied_rewrite(reason: object, replacement: object) -> dict[str, Any]:
    """A deny that tells the model the rewritten call it may issue instead."""
    text = replacement if isinstance(replacement, str) else json.dumps(replacement)
    lead = f"{optional_text(reason)}\n\n" if optional_text(reason) else ""
    output = {
        "hookEventName": PRE_TOOL_USE,
        "permissionDecision": "deny",
        "permissionDecisionReason": f"{lead}Tachograph policy rewrote this call, which Qwen "
        f"Code cannot apply, so it was blocked. Replacement input:\n{text}",
    }
    return {"hookSpecificOutput": output}
