"""What a dispatch records of the texts an agent or a handler sent: each one redacted.

The log keeps the recorded copy only. What the agent is answered stays as the handlers
decided it: a `modify` replacement must reach the runtime as the handler sent it (a
command with `[redacted]` in place of its password would not run), and a reason or a
context is the handler's message to the agent. Only a retry of the same event is
answered from the log, so from the recorded copy (`replayed`).
"""

from __future__ import annotations

import json
from typing import Any, Final

from domain.hook_dispatch import Decision
from domain.redaction import (
    MARGIN_BYTES,
    REDACTED,
    redact_json,
    redact_optional,
    redact_secrets,
)

TITLE_CHARS: Final = 80
SUMMARY_CHARS: Final = 500


def recorded_decision(decision: Decision) -> dict[str, Any]:
    """The decision's texts as the log keeps them: reason, context, replacement and each
    handler run's reason, redacted."""
    return {
        "reason": redact_optional(decision.reason),
        "additional_context": redact_optional(decision.additional_context),
        "replacement": redact_json(decision.replacement),
        "runs": [_redacted_run(run.record()) for run in decision.runs],
    }


def _redacted_run(record: dict[str, Any]) -> dict[str, Any]:
    """A run's record with its reason, and an approval's operator reason, redacted."""
    redacted = {**record, "reason": redact_optional(record["reason"])}
    approval = record.get("approval")
    if approval is not None and approval.get("reason") is not None:
        redacted["approval"] = {**approval, "reason": redact_optional(approval["reason"])}
    return redacted


def title_hint(prompt: str | None) -> str | None:
    """A session title from a prompt: its first line, redacted, at most 80 characters."""
    line = first_line(prompt, TITLE_CHARS + MARGIN_BYTES)
    if line is None:
        return None
    return redact_secrets(line)[:TITLE_CHARS] or None


def summary_hint(message: str | None) -> str | None:
    """A session summary from a Stop message: redacted, at most 500 characters."""
    if not message:
        return None
    return redact_secrets(message[: SUMMARY_CHARS + MARGIN_BYTES])[:SUMMARY_CHARS] or None


def first_line(text: str | None, limit: int) -> str | None:
    if not text:
        return None
    line = text.strip().splitlines()[0].strip() if text.strip() else ""
    return line[:limit] or None


def replayed(outcome: str, replacement: Any) -> tuple[str, str | None]:
    """A stored outcome as a retry is answered: a `modify` whose recorded replacement had
    a secret cut out cannot be run as recorded, so the retry is refused instead (with
    the reason to give); anything else is answered as recorded (reason None)."""
    if outcome == "modify" and replacement is not None and REDACTED in json.dumps(replacement):
        return "deny", (
            "The handler's replacement held a secret, and the log keeps only its redacted "
            "copy; this retried event is refused rather than run without it."
        )
    return outcome, None
