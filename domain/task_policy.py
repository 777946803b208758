"""Pure task policy: states, error classes, retry decisions, backoff, bounded activity records."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

QUEUED, RUNNING, CANCELLING = "queued", "running", "cancelling"
COMPLETED, FAILED, CANCELLED, DEAD_LETTER = "completed", "failed", "cancelled", "dead-letter"
ACTIVE_STATES = frozenset({QUEUED, RUNNING, CANCELLING})
TERMINAL_STATES = frozenset({COMPLETED, FAILED, CANCELLED, DEAD_LETTER})
TASK_STATES = ACTIVE_STATES | TERMINAL_STATES
RESOLVABLE_STATES = frozenset({FAILED, CANCELLED, DEAD_LETTER})

KIND_TASK, KIND_REMEDIATION = "task", "remediation"
# Where a task came from. Remediation tasks are "system": they must never count as
# self-update work (at most one of those may be active) nor retry like it.
SOURCE_USER, SOURCE_SCHEDULE, SOURCE_SELF_UPDATE, SOURCE_SYSTEM = (
    "user",
    "schedule",
    "self-update",
    "system",
)

ERROR_CLASSES = (
    "timeout",
    "provider",
    "infrastructure",
    "database",
    "hook_denied",
    "cancelled",
    "validation",
    "permission",
    "configuration",
    "unknown",
)
TRANSIENT_CLASSES = frozenset({"timeout", "provider", "infrastructure", "database"})
RETRYING_SOURCES = frozenset({SOURCE_SELF_UPDATE})

ACTIVITY_KINDS = ("text", "tool_call", "tool_result", "error", "status")
RECORD_LIMIT_BYTES = 8 * 1024
DETAIL_ACTIVITY = 256
ERROR_LIMIT_BYTES = 2 * 1024
RESOLUTION_LIMIT_BYTES = 2 * 1024
TRUNCATED = "…[truncated]"

AfterFailure = Literal["retry", "dead-letter", "failed"]


@dataclass(frozen=True)
class Backoff:
    """Capped exponential backoff: base · 2^(attempt−1), never more than cap."""

    base_s: float = 30.0
    cap_s: float = 15 * 60.0

    def delay(self, attempt: int) -> timedelta:
        """Wait after the given (1-based) failed attempt."""
        exponent = max(attempt - 1, 0)
        # Cap the exponent first so a large attempt number cannot overflow a float.
        seconds = self.base_s * (2 ** min(exponent, 32))
        return timedelta(seconds=min(seconds, self.cap_s))


def after_failure(
    source: str, error_class: str, attempt_count: int, max_attempts: int
) -> AfterFailure:
    """What a failed attempt leads to: only self-update work retries transient classes."""
    if source in RETRYING_SOURCES and error_class in TRANSIENT_CLASSES:
        return "retry" if attempt_count < max_attempts else "dead-letter"
    return "failed"


# Ordered: the first matching class wins, so the specific ones come first.
_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (name, re.compile(pattern, re.IGNORECASE))
    for name, pattern in (
        ("hook_denied", r"hook\b.{0,40}\b(denied|blocked)|(denied|blocked) by .{0,30}hook"),
        (
            "provider",
            r"rate.?limit|\b429\b|overloaded|\b529\b|\b50[0234]\b|api[ _]error|usage limit"
            r"|quota|model .{0,40}(not found|not supported|unavailable)",
        ),
        (
            "permission",
            r"permission denied|\beacces\b|\beperm\b|unauthori[sz]ed|forbidden|\b40[13]\b"
            r"|invalid api key|authentication",
        ),
        ("database", r"database|sqlite|psycopg|postgres"),
        (
            "infrastructure",
            r"connection (refused|reset|aborted)|econn|network|timed? ?out|\bdns\b"
            r"|temporar(y|ily) unavailable|broken pipe|no space left|out of memory",
        ),
        ("validation", r"invalid (argument|option|input|prompt|request)|usage:|unknown option"),
        (
            "configuration",
            r"command not found|no such file|not configured|missing .{0,30}config|configuration",
        ),
    )
)


def classify_failure(exit_code: int | None, text: str) -> str:
    """Error class of a failed attempt from its exit status and error output."""
    if exit_code == 126:
        return "permission"
    if exit_code == 127:
        return "configuration"
    for name, pattern in _PATTERNS:
        if pattern.search(text):
            return name
    if exit_code is not None and exit_code < 0:
        return "infrastructure"  # killed by a signal nobody here sent
    return "unknown"


def iso_utc(value: datetime) -> str:
    """Fixed-width ISO-8601 UTC (`...Z`), the API's timestamp format."""
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def truncate_utf8(text: str, limit_bytes: int) -> str:
    """At most `limit_bytes` of UTF-8 (marked when cut), never splitting a character."""
    raw = text.encode()
    if len(raw) <= limit_bytes:
        return text
    keep = max(limit_bytes - len(TRUNCATED.encode()), 0)
    return raw[:keep].decode(errors="ignore") + TRUNCATED


def _json_size(value: Any) -> int:
    return len(json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str).encode())


_BOUNDED_FIELDS = ("text", "args", "result", "error", "tool")


def bound_record(record: dict[str, Any], limit: int = RECORD_LIMIT_BYTES) -> dict[str, Any]:
    """The record with its largest fields cut until its JSON fits in `limit` bytes."""
    bounded = dict(record)
    for _ in range(2 * len(_BOUNDED_FIELDS)):
        excess = _json_size(bounded) - limit
        if excess <= 0:
            return bounded
        name = max(_BOUNDED_FIELDS, key=lambda f: _json_size(bounded.get(f)))
        value = bounded.get(name)
        if value is None:
            break
        text = (
            value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
        )
        # JSON escaping can grow a string, so cut by its escaped size and some slack.
        target = max(_json_size(text) - excess - 64, 0)
        bounded[name] = truncate_utf8(text, target)
    # Pathological input (huge keys?): keep only what is known to be small.
    return {k: bounded[k] for k in ("seq", "attempt", "at", "kind", "agent") if k in bounded}


def remediation_prompt(
    parent_id: str,
    parent_prompt: str,
    status: str,
    attempts: int,
    error_class: str | None,
    error: str | None,
    last_activity: list[dict[str, Any]],
) -> str:
    """The prompt of a remediation task: the original prompt, its error and last activity."""
    lines = [
        f"Task {parent_id} ended {status} after {attempts} attempt(s). "
        "Find and fix the cause so it can run again.",
        "",
        "Original prompt:",
        truncate_utf8(parent_prompt, 8 * 1024),
        "",
        f"Error ({error_class or 'unknown'}):",
        truncate_utf8(error or "(no error message)", ERROR_LIMIT_BYTES),
        "",
        "Last activity:",
    ]
    if not last_activity:
        lines.append("(none)")
    for record in last_activity[-10:]:
        detail = record.get("text") or record.get("error") or record.get("result") or ""
        if not isinstance(detail, str):
            detail = json.dumps(detail, ensure_ascii=False, default=str)
        tool = f" {record['tool']}" if record.get("tool") else ""
        lines.append(f"- [{record.get('kind', 'text')}{tool}] {truncate_utf8(detail, 512)}")
    return "\n".join(lines)
