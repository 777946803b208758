"""Secret redaction: the one function every stored text from an agent or a handler passes.

Pure policy, applied before anything is recorded (SPEC §8.1): tool inputs and responses,
prompts and the titles and summaries derived from them, Stop messages, handler reasons,
contexts and replacements, approval requests, learning evidence and task activity. The
patterns live in domain/secret_patterns.py, each with the cheap test that says when it
could match.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, Final

from domain.secret_patterns import REDACTED, RULES, applicable
from domain.task_policy import truncate_utf8

__all__ = [
    "REDACTED",
    "contains_secret",
    "evidence",
    "redact_bounded",
    "is_secret_member",
    "might_hold_secret",
    "redact_json",
    "redact_secrets",
]

EVIDENCE_LIMIT_BYTES = 2 * 1024
# Text is cut this far past its limit before redaction: a key straddling the first cut
# is then either redacted or lies wholly beyond the stored part, and redaction costs no
# more than the stored text.
MARGIN_BYTES = 512

# Members whose value is a credential whatever it looks like (`{"password": "hunter2"}`).
_SECRET_MEMBER: Final = re.compile(
    r"(?i)^(?:.*[_-])?(?:api[_-]?key|apikey|secret|token|password|passwd|passphrase"
    r"|access[_-]?key|private[_-]?key|client[_-]?secret|authorization|cookie)(?:[_-].*)?$"
)


def might_hold_secret(text: str) -> bool:
    """Whether redaction could change the text: False means `redact_secrets` keeps it."""
    return True in applicable(text)


def redact_secrets(text: str) -> str:
    """The text with every secret the patterns know replaced by `[redacted]`.

    Each pattern runs only where its cheap test says it could match: most text holds no
    secret, and the ingest path redacts every tool input and response head.
    """
    could_match = applicable(text)
    if True not in could_match:
        return text
    for rule, could in zip(RULES, could_match, strict=True):
        if could:
            text = rule.apply(text)
    return text


def is_secret_member(key: object) -> bool:
    """Whether a JSON member of this name holds a credential whatever its value."""
    return isinstance(key, str) and _SECRET_MEMBER.match(key) is not None


def redact_json(value: Any, cut: Callable[[str], str] | None = None) -> Any:
    """A JSON value with secret-named members replaced and every string redacted.

    Structure is kept: only strings change. `cut`, when given, bounds each string
    before redaction (a caller that stores at most so much need not redact more).
    """
    if isinstance(value, str):
        return redact_secrets(cut(value) if cut is not None else value)
    if isinstance(value, dict):
        return {
            key: REDACTED
            if is_secret_member(key) and value[key] is not None
            else redact_json(value[key], cut)
            for key in value
        }
    if isinstance(value, list):
        return [redact_json(item, cut) for item in value]
    return value


def redact_optional(text: str | None) -> str | None:
    """`redact_secrets` of a text that may be absent."""
    return redact_secrets(text) if text else text


def contains_secret(text: str | None) -> bool:
    """Whether redaction would change the text (a proposal carrying it must fail)."""
    return bool(text) and redact_secrets(text or "") != text


def cut_bytes(text: str, limit: int) -> str:
    """At most `limit` bytes of UTF-8, never splitting a character (unmarked)."""
    if len(text) * 4 <= limit:
        return text
    return text.encode()[:limit].decode(errors="ignore")


def redact_bounded(text: str, limit_bytes: int) -> str:
    """The text redacted, then cut (marked) to `limit_bytes`: a cut cannot hide a key."""
    return truncate_utf8(redact_secrets(cut_bytes(text, limit_bytes + MARGIN_BYTES)), limit_bytes)


def evidence(text: str | None) -> str | None:
    """A stored evidence field: redacted first (so a cut cannot hide a key), then ≤ 2 KiB."""
    if text is None:
        return None
    return redact_bounded(text, EVIDENCE_LIMIT_BYTES)
