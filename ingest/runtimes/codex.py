"""Codex adapter (Codex CLI 0.169): command-hook payloads to lifecycle events, decisions to
Codex's hook answers (§6.5).

Codex's hooks (`$CODEX_HOME/hooks.json`) follow Claude Code's: the same event names,
the same snake_case payload fields (plus Codex's own `turn_id`), and the same answer
shapes (`hookSpecificOutput.permissionDecision` with `updatedInput`, `decision: "block"`),
as verified against the 0.169.0 binary (tests/fixtures/SOURCES.md). Two differences: its shell
tool reaches hooks as `Bash` (`exec_command`'s `cmd` as `tool_input.command`), and
`apply_patch` carries the patch in `tool_input.command`; Tachograph records the latter as
a file-change call, `{"patch", "file_paths"}`, and sends a rewrite back in Codex's field.

Stdlib only: the command-hook client imports it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from domain.hook_dispatch import Decision
from domain.lifecycle import LifecycleEvent
from domain.lifecycle_events import (
    GATE_EVENTS,
    NOTIFICATION,
    PERMISSION_REQUEST,
    POST_TOOL_USE_FAILURE,
    STOP_FAILURE,
    SUBAGENT_START,
    TOOL_EVENTS,
    without,
)
from ingest.runtimes.claude_code import (
    MAPPED_FIELDS,
    HookPayloadError,
    decision_to_claude,
    split_fields,
    tool_event_id,
)
from ingest.runtimes.patches import PATCH_TOOL, patch_input, patch_of

AGENT: Final = "codex"

# Codex's events that are also Tachograph's normalised ones; the rest (PermissionRequest,
# Interrupt, ...) are stored as observational under their own names.
NORMALISED_EVENTS: Final = without(POST_TOOL_USE_FAILURE, STOP_FAILURE, NOTIFICATION)
# What a fail-closed command hook denies when Tachograph cannot be reached: the gates
# but SubagentStart, which Codex reports but does not let a hook block, and the
# permission dialog.
FAIL_CLOSED_EVENTS: Final = (GATE_EVENTS - {SUBAGENT_START}) | {PERMISSION_REQUEST}

_TOOL_EVENTS: Final = TOOL_EVENTS - {POST_TOOL_USE_FAILURE}

# Claude Code's fields, but Codex names its turn `turn_id` (Claude Code: `prompt_id`).
_MAPPED_FIELDS: Final[Mapping[str, tuple[str, type]]] = {
    **{k: v for k, v in MAPPED_FIELDS.items() if k != "prompt_id"},
    "turn_id": ("turn_id", str),
}


def codex_payload_to_event(payload: object, event: str | None = None) -> LifecycleEvent:
    """Map Codex's hook JSON to a LifecycleEvent; never fails on field content.

    `event` (the command hook's argument) wins over the payload's `hook_event_name`.
    """
    if not isinstance(payload, dict):
        raise HookPayloadError("a Codex hook body must be a JSON object")
    name = event or payload.get("hook_event_name")
    if not isinstance(name, str) or not name:
        raise HookPayloadError("a Codex hook body needs a non-empty hook_event_name")
    body = {k: v for k, v in payload.items() if k != "hook_event_name"}
    mapped, detail = split_fields(body, _MAPPED_FIELDS)
    if mapped.get("tool_name") == PATCH_TOOL:
        patch = patch_of(mapped.get("tool_input"))
        if patch is not None:
            mapped["tool_input"] = patch_input(patch)
    # As for Claude Code: only a tool event is named uniquely.
    event_id = tool_event_id(AGENT, name, mapped, _TOOL_EVENTS)
    return LifecycleEvent(name, event_id=event_id, agent=AGENT, detail=detail, **mapped)


def decision_to_codex(event: str, decision: Decision) -> tuple[dict[str, Any], str | None]:
    """Codex's hook answer: Claude Code's shapes, a patch rewrite in Codex's own field."""
    replacement = decision.replacement
    if decision.outcome == "modify" and isinstance(replacement, dict) and "patch" in replacement:
        patch = replacement.get("patch")
        if isinstance(patch, str):
            decision = Decision(
                decision.outcome,
                decision.reason,
                decision.additional_context,
                {"command": patch},
                decision.runs,
            )
    return decision_to_claude(event, decision)
