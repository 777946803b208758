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


# Each pattern runs only where a cheap test says it could match, since most text holds no
# secret and these patterns cost ~0.4 µs per character together (the ingest path redacts
# every tool input and response head). Each test accepts a superset of its pattern's
# matches on ASCII text, and a replacement (`[redacted]`) cannot make a new match of a
# later pattern. Other text runs every pattern: case-insensitive matching then knows
# letters (`ſ`, `K`) that a lowercase test would miss.
# Bytes of a token character ([A-Za-z0-9_-]) become `a`, every other byte a space: a run of
# `a` is then a run of token characters.
_TOKEN_CHARS = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-"
_RUNS = bytes(ord("a") if b in _TOKEN_CHARS else ord(" ") for b in range(256))
# Every key shape holds a run of at least 11 token characters (a JWT's shortest segment is
# `eyJ` and 8 more); an opaque token is a run of 32.
_SHAPE_RUN = b"a" * 11
_OPAQUE_RUN = b"a" * 32
_ALL = (True, True, True, True, True)


def _suspects(text: str) -> tuple[bool, bool, bool, bool, bool]:
    """For each pattern (private key, bearer, key shape, assignment, opaque token),
    whether it could match the text."""
    if not text.isascii():
        return _ALL
    lower = text.lower()
    runs = text.encode().translate(_RUNS)
    long_run = _SHAPE_RUN in runs  # an opaque token's run is longer still
    return (
        "-----BEGIN" in text,
        "bearer" in lower,
        long_run and _may_start_key_shape(text),
        "key" in lower or "secret" in lower or "token" in lower or "passw" in lower,
        long_run and _OPAQUE_RUN in runs,
    )


def _may_start_key_shape(text: str) -> bool:
    """Whether the text holds the start of any of _KEY_SHAPES (as `or`s: ~10x quicker
    than a loop or a regular expression of the alternatives)."""
    return (
        "sk-" in text
        or "gh" in text
        or "github_pat_" in text
        or "glpat-" in text
        or "xox" in text
        or "AKIA" in text
        or "ASIA" in text
        or "AIza" in text
        or "_live_" in text
        or "_test_" in text
        or "eyJ" in text
    )


def might_hold_secret(text: str) -> bool:
    """Whether redaction could change the text: False means `redact_secrets` keeps it."""
    return any(_suspects(text))


def redact_secrets(text: str) -> str:
    """The text with bearer tokens, API-key-like strings and private keys replaced."""
    private_key, bearer, key_shape, assignment, opaque = _suspects(text)
    if private_key:
        text = _PRIVATE_KEY.sub(REDACTED, text)
    if bearer:
        text = _BEARER.sub(lambda m: f"{m.group(1)}{m.group(2)}{REDACTED}", text)
    if key_shape:
        text = _KEY_SHAPES.sub(REDACTED, text)
    if assignment:
        text = _ASSIGNMENT.sub(lambda m: m.group(1) + REDACTED, text)
    if opaque:
        text = _OPAQUE.sub(_opaque, text)
    return text


def contains_secret(text: str | None) -> bool:
    """Whether redaction would change the text (a proposal carrying it must fail)."""
    return bool(text) and redact_secrets(text or "") != text


def evidence(text: str | None) -> str | None:
    """A stored evidence field: redacted first (so a cut cannot hide a key), then ≤ 2 KiB."""
    if text is None:
        return None
    return truncate_utf8(redact_secrets(text), EVIDENCE_LIMIT_BYTES)
