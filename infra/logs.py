"""Structured logs: one JSON object per line on stderr, with correlation ids where known.

Correlation ids come from a record's `extra` or from context variables bound for the
current request (request id, session, task) or task attempt (task, turn, session), so
every line logged while serving a request carries them without threading them through
call signatures. Configured secrets and bearer tokens are scrubbed from every line as a
last line of defence; code must still never log prompts, payloads or credentials.
"""

from __future__ import annotations

import json
import logging
import re
import sys
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar, Token
from datetime import UTC, datetime
from types import MappingProxyType
from typing import Any

_CONTEXT_KEYS = ("request_id", "session_id", "task_id", "turn_id", "dispatch_id")
_KNOWN_KEYS = frozenset(_CONTEXT_KEYS)
# One variable holding every id (a new dict per bind, never mutated): binding a
# request's ids is one `set`, not one per id, on every request.
_CONTEXT: ContextVar[Mapping[str, str | None]] = ContextVar(
    "tachograph_log_context", default=MappingProxyType({})
)
_BEARER = re.compile(r"(?i)\b(bearer\s+)[A-Za-z0-9._~+/=-]{8,}")
_REDACTED = "[redacted]"
# Values never printed in a log line (API key, hook secrets, signing keys); set at start-up.
_secrets: tuple[str, ...] = ()


def bind_log_context(**ids: object) -> list[Token[Mapping[str, str | None]]]:
    """Set correlation ids for the current context; returns tokens for `reset_log_context`."""
    if not ids.keys() <= _KNOWN_KEYS:
        unknown = sorted(set(ids) - _KNOWN_KEYS)
        raise KeyError(f"unknown log context ids: {unknown}")  # a programming error
    bound = dict(_CONTEXT.get())
    for key, value in ids.items():
        bound[key] = value if value is None or type(value) is str else str(value)
    return [_CONTEXT.set(bound)]


def reset_log_context(tokens: Iterable[Token[Mapping[str, str | None]]]) -> None:
    """Undo `bind_log_context` (in reverse order)."""
    for token in reversed(list(tokens)):
        _CONTEXT.reset(token)


@contextmanager
def log_context(**ids: object) -> Iterator[None]:
    """Correlation ids for every line logged inside the block (this thread or task)."""
    tokens = bind_log_context(**ids)
    try:
        yield
    finally:
        reset_log_context(tokens)


def current_log_context() -> dict[str, str]:
    """The correlation ids bound right now."""
    return {k: v for k, v in _CONTEXT.get().items() if v is not None}


def scrub(text: str) -> str:
    """Replace configured secrets and bearer tokens."""
    for secret in _secrets:
        if secret in text:
            text = text.replace(secret, _REDACTED)
    if "earer" in text:
        text = _BEARER.sub(lambda m: m.group(1) + _REDACTED, text)
    return text


class JsonFormatter(logging.Formatter):
    """Render a record as one JSON line with any known correlation ids."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "at": datetime.fromtimestamp(record.created, UTC).isoformat(),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": scrub(record.getMessage()),
        }
        bound = _CONTEXT.get()
        for key in _CONTEXT_KEYS:
            value = getattr(record, key, None)
            if value is None:
                value = bound.get(key)
            if value is not None:
                entry[key] = str(value)
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict):
            for key, value in fields.items():
                entry.setdefault(key, value)
        if record.exc_info:
            entry["error"] = scrub(self.formatException(record.exc_info))
        return json.dumps(entry, default=str)


def configure_logging(level: str = "INFO", secrets: Iterable[str | None] = ()) -> None:
    """Route every logger (uvicorn's too) through the JSON formatter."""
    global _secrets
    # Short values would blank out ordinary words; real secrets are long.
    _secrets = tuple(sorted({s for s in secrets if s and len(s) >= 8}, key=len, reverse=True))
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        logger = logging.getLogger(name)
        logger.handlers[:] = []
        logger.propagate = True
    # Libraries chatty at INFO about every outbound call, job run or job added at start-up
    # ("Adding job tentatively"): their warnings always, the rest only when debugging.
    quiet = logging.DEBUG if root.level <= logging.DEBUG else max(logging.WARNING, root.level)
    for name in ("httpx", "httpcore", "apscheduler.executors.default", "apscheduler.scheduler"):
        logging.getLogger(name).setLevel(quiet)
