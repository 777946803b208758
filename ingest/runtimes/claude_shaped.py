"""What the runtimes that speak Claude Code's hook dialect (Qwen Code, Factory Droid) share
beyond claude_code.py: their own tool names recorded under Claude Code's, and context
placed only where the runtime reads it (§6.5).

Stdlib only: the command-hook client imports it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ingest.runtimes.claude_code import DENY_REASON


def rename_tool(mapped: dict[str, Any], detail: dict[str, Any], names: Mapping[str, str]) -> None:
    """Record a runtime's tool under Claude Code's name for it (so policy rules, approvals
    and activity search treat it alike), keeping the runtime's own in `nativeToolName`."""
    native = mapped.get("tool_name")
    if isinstance(native, str) and native in names:
        mapped["tool_name"] = names[native]
        detail["nativeToolName"] = native


def place_context(
    event: str,
    answer: dict[str, Any],
    context: str | None,
    notes: list[str],
    *,
    reads_context: frozenset[str],
    runtime: str,
) -> None:
    """Put additionalContext where the runtime reads it; else into a block's or a deny's
    reason (which the model reads); else record in the note that it was dropped."""
    if not context:
        return
    output = answer.get("hookSpecificOutput")
    if event in reads_context:
        answer.setdefault("hookSpecificOutput", {"hookEventName": event})
        answer["hookSpecificOutput"]["additionalContext"] = context
    elif answer.get("decision") == "block":
        answer["reason"] = f"{answer['reason']}\n\n{context}"
    elif isinstance(output, dict) and output.get("permissionDecision") == "deny":
        reason = output.get("permissionDecisionReason") or DENY_REASON
        output["permissionDecisionReason"] = f"{reason}\n\n{context}"
    else:
        notes.append(f"additionalContext dropped: {runtime} does not read it on {event}")
