"""Input limits beyond field sizes: text every store can hold, bounded nesting, sane queries.

Three things a client can send that would otherwise fail deep inside (a 500) or, worse,
be recorded and then jam a projection for good: a NUL character (PostgreSQL text
cannot hold it), a lone UTF-16 surrogate (not encodable as UTF-8, so the event cannot
be saved), and JSON nested so deeply that encoders give up. All are refused at the
edge with 422 before anything is recorded.
"""

from __future__ import annotations

import json
import re
from typing import Any

from pydantic import ValidationInfo
from pydantic_core import PydanticCustomError
from starlette.types import ASGIApp, Receive, Scope, Send

from api.middleware import send_error

MAX_JSON_DEPTH = 64
MAX_POSITION = 2**63 - 1  # log positions, versions and revisions are 64-bit in both stores

_SURROGATE = re.compile("[\ud800-\udfff]")


class TextProblem(ValueError):
    """A JSON value no store can hold; the message names where."""


def check_json(value: Any, *, max_depth: int = MAX_JSON_DEPTH) -> None:
    """Raise TextProblem for NUL, lone surrogates (in keys too) or nesting over `max_depth`."""
    stack: list[tuple[Any, str, int]] = [(value, "", 0)]
    while stack:
        item, where, depth = stack.pop()
        if isinstance(item, str):
            _check_text(item, where)
        elif isinstance(item, dict | list):
            if depth >= max_depth:
                top = where.split(".", 1)[0] or "body"
                raise TextProblem(f"{top}: JSON nested deeper than {max_depth} levels")
            pairs = item.items() if isinstance(item, dict) else enumerate(item)
            for key, child in pairs:
                if isinstance(key, str):
                    _check_text(key, where or "body")
                stack.append((child, f"{where}.{key}" if where else str(key), depth + 1))


def _check_text(text: str, where: str) -> None:
    where = where if len(where) <= 80 else where[:80] + "…"
    if "\x00" in text:
        raise TextProblem(f"{where or 'body'}: NUL characters are not allowed")
    if not text.isascii() and _SURROGATE.search(text):
        raise TextProblem(f"{where or 'body'}: lone UTF-16 surrogates are not valid text")


# Validation context key: the raw body was already proven clean (see `plainly_clean`).
TEXT_CHECKED = "json_text_checked"


def plainly_clean(raw: bytes) -> bool:
    """True only if the JSON document `raw` cannot hold anything `check_json` refuses.

    A cheap look at the bytes instead of a walk over the decoded value: NUL and lone
    surrogates can only arrive as `\\u` escapes, or (json.loads decodes bytes with
    `surrogatepass`) as UTF-8-style surrogate bytes, which start with 0xED; and a
    document with at most 64 brackets cannot nest deeper than 64. False means "walk it".
    """
    return (
        json.detect_encoding(raw) == "utf-8"  # UTF-16/32 bodies could carry any code unit
        and b"\\u" not in raw
        and b"\xed" not in raw
        and raw.count(b"{") + raw.count(b"[") <= MAX_JSON_DEPTH
    )


def validate_json_text(data: Any, info: ValidationInfo) -> Any:
    """Pydantic `mode="before"` model validator: the same checks as a 422 validation error."""
    if info.context and info.context.get(TEXT_CHECKED):
        return data
    try:
        check_json(data)
    except TextProblem as exc:
        raise PydanticCustomError("invalid_text", str(exc)) from None
    return data


def loads_checked(raw: bytes) -> Any:
    """json.loads for routes that read their raw body; TextProblem or ValueError on bad input."""
    try:
        value = json.loads(raw)
    except RecursionError:
        raise TextProblem(f"body: JSON nested deeper than {MAX_JSON_DEPTH} levels") from None
    check_json(value)
    return value


class QueryGuardMiddleware:
    """Refuse NUL characters in the query string (they would reach SQL parameters)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            query: bytes = scope.get("query_string", b"")
            if b"%00" in query or b"\x00" in query:
                message = "Query parameters may not contain NUL characters."
                await send_error(send, 422, "validation_error", message)
                return
        await self.app(scope, receive, send)
