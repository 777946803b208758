"""Every hook route, declared once: what agent runtimes call on every lifecycle event.

`POST /api/sessions/{id}/events`, `/hooks/claude`, `/hooks/{runtime}`,
`/hooks/{runtime}/{event}` and `/hooks/coder` are plain Starlette routes placed first in
the app's router. On two cores FastAPI's dependency solving and response handling cost
more than the group-committed append itself, and these routes need none of it: each
reads its raw body once (already size-checked and authenticated by the middleware),
hands it to its answer function (api/hook_calls.py, api/coder_webhook.py) and returns
the answer. Whatever they raise renders through the app's one error registry
(api/errors.py), as on every other route. Their OpenAPI operations are described here
too, since FastAPI documents only its own routes.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Final
from uuid import UUID

from fastapi import FastAPI
from fastapi.exceptions import RequestValidationError
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Match, Route
from starlette.types import Scope

from api import hook_caller
from api.auth import principal_of
from api.coder_webhook import answer_coder
from api.hook_calls import answer_claude, answer_events, answer_runtime
from api.schemas import LifecycleEventBody
from domain.lifecycle import EVENT_NAME_PATTERN
from ingest.runtimes.runtimes import runtime_for

# The runtimes served by /hooks/{runtime}; Claude Code and Coder have their own routes.
HOOK_RUNTIMES: Final = ("codex", "gemini", "copilot")
_EVENT_NAME: Final = re.compile(EVENT_NAME_PATTERN)
_NOT_WORD: Final = re.compile(r"\W")


def _invalid(loc: tuple[str, str], kind: str, message: str, value: str) -> RequestValidationError:
    """A path parameter refused as FastAPI would have refused it (same 422 body)."""
    return RequestValidationError([{"type": kind, "loc": loc, "msg": message, "input": value}])


async def _body(request: Request) -> bytes:
    """The raw body, read once; from then on a held approval can tell when the caller
    leaves (api/hook_caller.py)."""
    hook_caller.bind(request.receive)
    return await request.body()


def _runtime(request: Request) -> str:
    name: str = request.path_params["runtime"]
    if name not in HOOK_RUNTIMES:
        allowed = ", ".join(repr(r) for r in HOOK_RUNTIMES[:-1])
        message = f"Input should be {allowed} or {HOOK_RUNTIMES[-1]!r}"
        raise _invalid(("path", "runtime"), "literal_error", message, name)
    return name


async def ingest_event(request: Request) -> Response:
    """Record a lifecycle event from an agent runtime and return the combined hook decision."""
    raw_id: str = request.path_params["session_id"]
    try:
        session_id = UUID(raw_id)
    except ValueError:
        message = "Input should be a valid UUID"
        raise _invalid(("path", "session_id"), "uuid_parsing", message, raw_id) from None
    services = request.app.state.services
    return await answer_events(
        services, principal_of(request.scope), session_id, await _body(request)
    )


async def claude_hook(request: Request) -> Response:
    """Claude Code's native HTTP hook: its hook JSON in, its answer format out."""
    services = request.app.state.services
    return await answer_claude(
        services, principal_of(request.scope), request.headers.get, await _body(request)
    )


async def coder_hook(request: Request) -> Response:
    """Coder's chat lifecycle webhook: HS256-signed request in, signed answer out."""
    hook_caller.bind(request.receive)
    return await answer_coder(request.app.state.services, request)


async def runtime_hook(request: Request) -> Response:
    """A runtime's hook JSON in (the event named by its `hook_event_name`), its own
    answer format out."""
    return await _answer_runtime(request, _runtime(request), None)


async def runtime_event_hook(request: Request) -> Response:
    """The same, for a hook registered for one event (Copilot CLI's own payloads do not
    name their event)."""
    runtime = _runtime(request)
    event: str = request.path_params["event"]
    if not _EVENT_NAME.match(event):
        message = f"String should match pattern '{EVENT_NAME_PATTERN}'"
        raise _invalid(("path", "event"), "string_pattern_mismatch", message, event)
    return await _answer_runtime(request, runtime, event)


async def _answer_runtime(request: Request, name: str, event: str | None) -> Response:
    services = request.app.state.services
    runtime = runtime_for(name, gemini_model_events=services.settings.gemini_model_events)
    principal = principal_of(request.scope)
    return await answer_runtime(
        services, principal, request.headers.get, await _body(request), runtime, event
    )


@dataclass(frozen=True)
class HookRoute:
    path: str
    endpoint: Callable[[Request], Awaitable[Response]]
    tag: str
    parameters: tuple[dict[str, Any], ...] = ()
    body: dict[str, Any] | None = None  # the documented body, where FastAPI had a model


def _path_parameter(name: str, schema: dict[str, Any]) -> dict[str, Any]:
    title = name.replace("_", " ").title()
    return {"name": name, "in": "path", "required": True, "schema": {"title": title, **schema}}


def _body_schema(model: type[LifecycleEventBody]) -> dict[str, Any]:
    """The model's schema as FastAPI documented it: optional fields without `default: null`."""
    schema = model.model_json_schema()
    for field in schema.get("properties", {}).values():
        if "default" in field and field["default"] is None:
            del field["default"]
    return schema


_RUNTIME = _path_parameter("runtime", {"type": "string", "enum": list(HOOK_RUNTIMES)})
# The hottest first: the router tries routes in order.
HOOK_ROUTES: Final = (
    HookRoute(
        "/api/sessions/{session_id}/events",
        ingest_event,
        "hooks",
        (_path_parameter("session_id", {"type": "string", "format": "uuid"}),),
        _body_schema(LifecycleEventBody),
    ),
    HookRoute("/hooks/claude", claude_hook, "agent adapters"),
    HookRoute("/hooks/coder", coder_hook, "agent adapters"),
    HookRoute("/hooks/{runtime}", runtime_hook, "agent adapters", (_RUNTIME,)),
    HookRoute(
        "/hooks/{runtime}/{event}",
        runtime_event_hook,
        "agent adapters",
        (_RUNTIME, _path_parameter("event", {"type": "string", "pattern": EVENT_NAME_PATTERN})),
    ),
)


class _LabelledRoute(Route):
    """A Starlette route that names itself in the scope, as FastAPI's routes do, so the
    access log and metrics label its requests by its template."""

    def matches(self, scope: Scope) -> tuple[Match, Scope]:
        match, child_scope = super().matches(scope)
        if match is not Match.NONE:
            child_scope["route"] = self
        return match, child_scope


def install_hook_routes(app: FastAPI) -> None:
    """Put the hook routes ahead of every FastAPI route."""
    routes = [
        _LabelledRoute(r.path, r.endpoint, methods=["POST"], name=r.endpoint.__name__)
        for r in HOOK_ROUTES
    ]
    app.router.routes[:0] = routes


def hook_route_operations() -> dict[str, dict[str, Any]]:
    """The hook routes' OpenAPI path items (api/openapi.py completes their errors)."""
    paths: dict[str, dict[str, Any]] = {}
    for route in HOOK_ROUTES:
        name = route.endpoint.__name__
        doc = inspect.cleandoc(route.endpoint.__doc__ or "")
        operation: dict[str, Any] = {
            "tags": [route.tag],
            "summary": name.replace("_", " ").title(),
            "description": doc,
            "operationId": f"{name}{_NOT_WORD.sub('_', route.path)}_post",
            "responses": {
                "200": {
                    "description": "Successful Response",
                    "content": {"application/json": {"schema": {}}},
                }
            },
        }
        if route.parameters:
            operation["parameters"] = list(route.parameters)
        if route.body is not None:
            content = {"application/json": {"schema": route.body}}
            operation["requestBody"] = {"required": True, "content": content}
        paths[route.path] = {"post": operation}
    return paths
