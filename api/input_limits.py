"""Input limits beyond field sizes: strict JSON bodies every store can hold, sane queries.

What a client can send that would otherwise fail deep inside (a 500) or, worse, be
recorded and then break reads or jam a projection for good: NaN or Infinity (not
JSON), a NUL character (PostgreSQL text cannot hold it), a lone UTF-16 surrogate (not
encodable as UTF-8), and JSON nested so deeply that decoders and encoders give up. Every
JSON body, on every route, goes through the one strict decoder (domain/strict_json.py)
and is refused before anything is recorded: the FastAPI routes through StrictJSONRoute,
the hook routes, which read their raw bodies, through `json_body`.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import Request, Response
from fastapi.routing import APIRoute
from pydantic import ValidationInfo
from pydantic_core import PydanticCustomError
from starlette.types import ASGIApp, Receive, Scope, Send

from api.errors import ApiError, RefusedBody
from api.middleware import send_error
from domain.strict_json import (
    CONSTANT,
    MAX_JSON_DEPTH,
    SYNTAX,
    StrictJSONError,
    check_json,
    plainly_clean,
    strict_loads,
)

__all__ = ["MAX_JSON_DEPTH", "check_json", "plainly_clean"]

MAX_POSITION = 2**63 - 1  # log positions, versions and revisions are 64-bit in both stores

# Validation context key: the raw body was already proven clean (see `plainly_clean`).
TEXT_CHECKED = "json_text_checked"


def validate_json_text(data: Any, info: ValidationInfo) -> Any:
    """Pydantic `mode="before"` model validator: the same checks as a 422 validation error."""
    if info.context and info.context.get(TEXT_CHECKED):
        return data
    try:
        check_json(data)
    except StrictJSONError as exc:
        raise PydanticCustomError("invalid_text", _sentence(exc)) from None
    return data


def json_body(raw: bytes) -> Any:
    """A request body decoded by the one strict decoder; ApiError naming what is wrong.

    400 `invalid_json` for what is not JSON (including NaN and Infinity), 422
    `validation_error` for JSON no store can hold or nested too deeply.
    """
    try:
        return strict_loads(raw, refuse_nul=True)
    except StrictJSONError as exc:
        raise body_error(exc) from None


def body_error(exc: StrictJSONError) -> ApiError:
    """The API's answer to a refused JSON document."""
    if exc.kind in (SYNTAX, CONSTANT):
        return ApiError(400, "invalid_json", f"The request body {exc.problem}.")
    return ApiError(422, "validation_error", _sentence(exc) + ".")


def _sentence(exc: StrictJSONError) -> str:
    return f"{exc.where or 'The request body'} {exc.problem}"


class StrictJSONRequest(Request):
    """A request whose JSON body FastAPI decodes with the strict decoder."""

    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            try:
                self._json = json_body(await self.body())
            except ApiError as exc:
                raise RefusedBody(exc) from None  # FastAPI passes only HTTPExceptions on
        return self._json


class StrictJSONRoute(APIRoute):
    """Every API route: bodies decoded strictly (set on each router; tests check all)."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def strict(request: Request) -> Response:
            return await handler(StrictJSONRequest(request.scope, request.receive))

        return strict


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
