"""Factory Droid adapter (Droid 0.225.2): hook payloads to lifecycle events, decisions to
Droid's hook answers (§6.5).

Droid reads Claude-Code-style command hooks from `~/.factory/settings.json` (`timeout` in
seconds) and sends Claude Code's payload fields under Claude Code's event names (only
SessionStart, UserPromptSubmit, PreToolUse, PostToolUse, Notification, Stop,
SubagentStop, PreCompact and SessionEnd exist). What differs, as verified against the
0.225.2 binary:

- Its shell tool is `Execute` and its file-creating tool `Create`: recorded as `Bash` and
  `Write` (their inputs already use Claude Code's fields; the native name stays in
  `detail.nativeToolName`). Read, LS, Edit, Grep, Glob and Task are Claude Code's names.
- No tool-call id, no turn id: nothing names one occurrence, so no event gets an
  event_id and a PostToolUse is not paired with its PreToolUse by id.
- PreToolUse answers are Claude Code's (`permissionDecision: "deny"` blocks, the model
  reads "Error: <reason>"; `allow` with `updatedInput` rewrites); the legacy top-level
  `decision: "block"` is ignored there, and Claude Code's renderer never sends it there.
- `additionalContext` reaches the model from SessionStart and PostToolUse only.
- `droid exec` fires no UserPromptSubmit: such a session has no prompt to title it.

Stdlib only: the command-hook client imports it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any, Final

from domain.hook_dispatch import Decision
from domain.lifecycle import LifecycleEvent
from domain.lifecycle_events import (
    GATE_EVENTS,
    POST_COMPACT,
    POST_TOOL_USE_FAILURE,
    STOP_FAILURE,
    SUBAGENT_START,
    without,
)
from ingest.runtimes.claude_code import (
    MAPPED_FIELDS,
    HookPayloadError,
    decision_to_claude,
    optional_text,
    split_fields,
)
from ingest.runtimes.claude_shaped import place_context, rename_tool

AGENT: Final = "factory-droid"

# Droid's hook events: all of them normalised names, and all `hook install droid`
# registers.
NORMALISED_EVENTS: Final = without(
    POST_TOOL_USE_FAILURE, SUBAGENT_START, STOP_FAILURE, POST_COMPACT
)
FAIL_CLOSED_EVENTS: Final = GATE_EVENTS.intersection(NORMALISED_EVENTS)

TOOL_NAMES: Final[Mapping[str, str]] = {"Execute": "Bash", "Create": "Write"}
# Where Droid 0.225.2 reads hookSpecificOutput.additionalContext.
_CONTEXT_EVENTS: Final = frozenset({"SessionStart", "PostToolUse"})


def droid_payload_to_event(payload: object, event: str | None = None) -> LifecycleEvent:
    """Map Droid's hook JSON to a LifecycleEvent; never fails on field content.

    `event` (the command hook's argument) wins over the payload's `hook_event_name`.
    """
    if not isinstance(payload, dict):
        raise HookPayloadError("a Factory Droid hook body must be a JSON object")
    name = event or payload.get("hook_event_name")
    if not isinstance(name, str) or not name:
        raise HookPayloadError("a Factory Droid hook body needs a non-empty hook_event_name")
    body = {k: v for k, v in payload.items() if k != "hook_event_name"}
    mapped, detail = split_fields(body, MAPPED_FIELDS)
    rename_tool(mapped, detail, TOOL_NAMES)
    return LifecycleEvent(name, agent=AGENT, detail=detail, **mapped)


def decision_to_droid(event: str, decision: Decision) -> tuple[dict[str, Any], str | None]:
    """Droid's hook answer (Claude Code's shapes), plus an audit note when degraded."""
    answer, note = decision_to_claude(event, replace(decision, additional_context=None))
    notes = [note] if note else []
    context = optional_text(decision.additional_context)
    place_context(
        event, answer, context, notes, reads_context=_CONTEXT_EVENTS, runtime="Factory Droid"
    )
    return answer, "; ".join(notes) or None
