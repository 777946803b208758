"""Secret redaction of learning evidence (SPEC §8.1): pure policy, applied before storing."""

from __future__ import annotations

import re

from domain.task_policy import truncate_utf8

REDACTED = "[redacted]"
EVIDENCE_LIMIT_BYTES = 2 * 1024

# A PEM private key; an unterminated one (cut off by a log, say) is redacted to the end.
_PRIVATE_KEY = re.compile(
    r"-----BEGIN[A-Z0-9 ]*PRIVATE KEY-----(?:.*?-----END[A-Z0-9 ]*PRIVATE KEY-----|.*\Z)",
    re.DOTALL,
)
# The credential after an HTTP auth scheme; the scheme word stays so the text still reads.
_BEARER = re.compile(r"(?i)\b(bearer)(\s+)([A-Za-z0-9\-._~+/]{8,}=*)")
# Well-known API key shapes: OpenAI/Anthropic, GitHub, GitLab, Slack, AWS, Google, Stripe, JWTs.
_KEY_SHAPES = re.compile(
    r"\b(?:"
    r"sk-[A-Za-z0-9_\-]{16,}"
    r"|(?:ghp|gho|ghu|ghs|ghr)_[A-Za-z0-9]{20,}"
    r"|github_pat_[A-Za-z0-9_]{20,}"
    r"|glpat-[A-Za-z0-9_\-]{20,}"
    r"|xox[abposr]-[A-Za-z0-9\-]{10,}"
    r"|(?:AKIA|ASIA)[0-9A-Z]{16}"
    r"|AIza[0-9A-Za-z_\-]{35}"
    r"|(?:sk|rk|pk)_(?:live|test)_[A-Za-z0-9]{16,}"
    r"|eyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}"
    r")"
)
# `api_key=...`, `"password": "..."`, `SECRET: ...`: the value of a secret-named assignment.
_ASSIGNMENT = re.compile(
    r"(?i)((?:api[_-]?key|apikey|secret|token|password|passwd|access[_-]?key|private[_-]?key"
    r"|client[_-]?secret)[A-Za-z0-9_\-]*[\"']?\s*[:=]\s*[\"']?)([^\s\"',;]{6,})"
)
# A long opaque token mixing upper case, lower case and digits (hex digests do not qualify).
_OPAQUE = re.compile(r"(?<![A-Za-z0-9_\-])[A-Za-z0-9_\-]{32,}(?![A-Za-z0-9_\-])")


def _opaque(match: re.Match[str]) -> str:
    token = match.group(0)
    mixed = (
        any(c.isupper() for c in token)
        and any(c.islower() for c in token)
        and any(c.isdigit() for c in token)
    )
    return REDACTED if mixed else token


def redact_secrets(text: str) -> str:
    """The text with bearer tokens, API-key-like strings and private keys replaced."""
    text = _PRIVATE_KEY.sub(REDACTED, text)
    text = _BEARER.sub(lambda m: f"{m.group(1)}{m.group(2)}{REDACTED}", text)
    text = _KEY_SHAPES.sub(REDACTED, text)
    text = _ASSIGNMENT.sub(lambda m: m.group(1) + REDACTED, text)
    return _OPAQUE.sub(_opaque, text)


def contains_secret(text: str | None) -> bool:
    """Whether redaction would change the text (a proposal carrying it must fail)."""
    return bool(text) and redact_secrets(text or "") != text


def evidence(text: str | None) -> str | None:
    """A stored evidence field: redacted first (so a cut cannot hide a key), then ≤ 2 KiB."""
    if text is None:
        return None
    return truncate_utf8(redact_secrets(text), EVIDENCE_LIMIT_BYTES)
