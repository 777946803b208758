"""The two hook routes without FastAPI's per-request machinery: a transport shim.

`POST /api/sessions/{id}/events` and `POST /hooks/claude` are called on every tool
call of every agent, and on two cores FastAPI's routing, dependency solving and
response handling cost more than the group-committed append itself. This innermost
middleware hands those requests straight to the functions the routes call
(api/hook_calls.py): same parsing, rules, service call, rendering and headers.

A request the functions refuse (bad input, 403, 404) falls through to the FastAPI
route, which raises the same error and renders it the canonical way; nothing was
recorded for it. A body in several chunks, or a query string, also falls through.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from uuid import UUID

from fastapi import FastAPI
from fastapi.exceptions import RequestValidationError
from starlette.datastructures import Headers
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from api import hook_caller
from api.auth import principal_of
from api.errors import DATABASE_DOWN, ApiError
from api.hook_calls import CLAUDE_ROUTE, EVENTS_ROUTE, answer_claude, answer_events
from api.middleware import HOOK_PATHS, replaying
from api.observability import ROUTE_TEMPLATE
from bootstrap import Services
from domain.errors import DomainError

_EVENTS_PREFIX = "/api/sessions/"
_EVENTS_SUFFIX = "/events"
# Refusals (and a database outage) are raised before anything is recorded; the route
# raises them again and renders them the canonical way.
_REFUSED: tuple[type[Exception], ...] = (
    ApiError,
    DomainError,
    RequestValidationError,
    *DATABASE_DOWN,
)


class IngestFastPath:
    """Answers the two hook routes through their shared functions; passes the rest on."""

    def __init__(self, app: ASGIApp, fastapi_app: FastAPI) -> None:
        self.app = app
        self.fastapi_app = fastapi_app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] == "http"
            and scope["method"] == "POST"
            and HOOK_PATHS.match(scope["path"])
        ):
            hook_caller.bind(receive)  # a held approval watches for the caller leaving
        if scope["type"] != "http" or scope["method"] != "POST" or scope["query_string"]:
            await self.app(scope, receive, send)
            return
        answer, route = self._match(scope["path"])
        if answer is None:
            await self.app(scope, receive, send)
            return
        first = await receive()
        if first["type"] != "http.request" or first.get("more_body", False):
            await self.app(scope, replaying(first, receive), send)
            return
        services: Services = self.fastapi_app.state.services
        try:
            response = await answer(services, scope, first.get("body", b""))
        except _REFUSED:
            await self.app(scope, replaying(first, receive), send)
            return
        scope[ROUTE_TEMPLATE] = route  # what the access log and metrics label it by
        await response(scope, receive, send)

    def _match(self, path: str) -> tuple[Callable[..., Awaitable[Response]] | None, str]:
        if path == CLAUDE_ROUTE:
            return _claude, CLAUDE_ROUTE
        if path.startswith(_EVENTS_PREFIX) and path.endswith(_EVENTS_SUFFIX):
            raw_id = path[len(_EVENTS_PREFIX) : -len(_EVENTS_SUFFIX)]
            if len(raw_id) == 36:  # only the canonical spelling; others go to the route
                return _events, EVENTS_ROUTE
        return None, ""


async def _events(services: Services, scope: Scope, body: bytes) -> Response:
    path: str = scope["path"]
    try:
        session_id = UUID(path[len(_EVENTS_PREFIX) : -len(_EVENTS_SUFFIX)])
    except ValueError:
        raise ApiError(422, "validation_error", "session_id is not a UUID.") from None
    return await answer_events(services, principal_of(scope), session_id, body)


async def _claude(services: Services, scope: Scope, body: bytes) -> Response:
    return await answer_claude(services, principal_of(scope), Headers(scope=scope).get, body)
