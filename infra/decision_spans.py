"""One hook decision as the attributes of an OpenTelemetry `apply_guardrail` span.

Follows the OpenTelemetry semantic conventions for GenAI security operations
(`span.gen_ai.apply_guardrail.internal`, status Development): Tachograph is the
guardian, the hook's call is the target, the handler or rule that decided is the
policy. What those conventions have no name for is under `tachograph.*`. The table of
every attribute is in docs/telemetry.md; this module and that table change together.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from importlib import metadata
from typing import Any, Final
from uuid import UUID

from domain.hook_dispatch import POLICY_HANDLER, Decision
from domain.lifecycle import LifecycleEvent
from domain.redaction import redact_optional

GUARDIAN_NAME: Final = "Tachograph"
SPAN_NAME: Final = f"apply_guardrail {GUARDIAN_NAME}"
# The conventions ask for a low-cardinality reason without sensitive content: the
# recorded (redacted) reason, cut to this many characters.
REASON_MAX: Final = 256

# Tachograph's outcome -> `gen_ai.security.decision.type` (well-known values where one
# applies; `ask` is none of them: the call waits for a person, it is not yet allowed).
DECISION_TYPES: Final[Mapping[str, str]] = {
    "pass": "allow",
    "deny": "deny",
    "modify": "modify",
    # A Stop refused: the agent is told to go on instead of stopping.
    "continue": "deny",
    "ask": "ask",
}
# The hook's event -> `gen_ai.security.target.type` (free-form in the conventions).
TARGET_TYPES: Final[Mapping[str, str]] = {
    "PreToolUse": "tool_call",
    "PermissionRequest": "tool_call",
    "PostToolUse": "tool_result",
    "PostToolUseFailure": "tool_result",
    "UserPromptSubmit": "llm_input",
    "Stop": "llm_output",
    "SubagentStop": "llm_output",
}
LIFECYCLE_TARGET: Final = "lifecycle"


def _version() -> str:
    try:
        return metadata.version("tachograph")
    except metadata.PackageNotFoundError:
        return "unknown"


GUARDIAN_VERSION: Final = _version()


def decision_attributes(
    session_id: UUID,
    ev: LifecycleEvent,
    dispatch_id: UUID,
    decision: Decision,
    position: int | None,
    link: str | None,
) -> dict[str, Any]:
    """The span's attributes; absent facts are left out, never sent empty."""
    reason = redact_optional(decision.reason)  # as the log records it
    attributes: dict[str, Any] = {
        "gen_ai.operation.name": "apply_guardrail",
        "gen_ai.guardian.name": GUARDIAN_NAME,
        "gen_ai.guardian.provider.name": "tachograph",
        "gen_ai.guardian.version": GUARDIAN_VERSION,
        "gen_ai.security.decision.type": DECISION_TYPES.get(decision.outcome, decision.outcome),
        "gen_ai.security.target.type": TARGET_TYPES.get(ev.event, LIFECYCLE_TARGET),
        "gen_ai.conversation.id": str(session_id),
        "tachograph.session.id": str(session_id),
        "tachograph.dispatch.id": str(dispatch_id),
        "tachograph.hook.event": ev.event,
        "tachograph.decision.outcome": decision.outcome,
        "tachograph.log.recorded": position is not None,
    }
    optional = {
        "gen_ai.security.target.id": ev.tool_call_id,
        "gen_ai.security.decision.reason": reason[:REASON_MAX] if reason else None,
        "gen_ai.agent.name": ev.agent,
        "gen_ai.tool.name": ev.tool_name,
        "gen_ai.tool.call.id": ev.tool_call_id,
        "tachograph.turn.id": ev.turn_id,
        "tachograph.tool_call.id": ev.tool_call_id,
        "tachograph.agent.session_id": ev.agent_session_id,
        "tachograph.log.position": position,
        "tachograph.log.link": link,
    }
    attributes.update((key, value) for key, value in optional.items() if value is not None)
    attributes.update(_policy_attributes(decision))
    return attributes


def _policy_attributes(decision: Decision) -> dict[str, Any]:
    """Which rule decided: the policy engine's rule and revision when the decision
    carries them, else the handler (or the code-owned tool policy) that decided."""
    hit = decision.policy
    if hit is not None:
        return {
            "gen_ai.security.policy.id": hit.rule_id,
            "gen_ai.security.policy.version": hit.revision_id,
            "tachograph.policy.mode": hit.mode,
            "tachograph.policy.outcome": hit.outcome,
        }
    attributes: dict[str, Any] = {}
    deciding = _deciding_handler(decision)
    if deciding is not None:
        attributes["gen_ai.security.policy.id"] = deciding
    for run in decision.runs:
        if run.approval is not None:  # an operator's (or a deadline's) settlement
            for key in ("id", "rule_id", "status", "verdict", "operator"):
                value = run.approval.get(key)
                if value is not None:
                    attributes[f"tachograph.approval.{key}"] = str(value)
    return attributes


def _deciding_handler(decision: Decision) -> str | None:
    """The last run that answered the combined outcome (the one that decided); None for
    a pass no handler had to make."""
    if decision.outcome == "pass" and not decision.approved:
        return None
    for run in reversed(decision.runs):
        if run.outcome == decision.outcome and run.failure is None:
            return run.handler_id
    for run in reversed(decision.runs):
        if run.handler_id == POLICY_HANDLER:
            return run.handler_id
    return decision.runs[-1].handler_id if decision.runs else None


def span_times(received: datetime, ended_ns: int) -> tuple[int, int]:
    """Start (the call's arrival) and end (its record settled), in ns since the epoch."""
    start = int(received.timestamp() * 1_000_000_000)
    return start, max(start, ended_ns)
