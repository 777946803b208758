"""Per-request observability: request id, log correlation ids, request metrics, access log.

A pure ASGI middleware (no BaseHTTPMiddleware: it would buffer streaming responses and
cost a task per request). Requests are labelled by route template, never by raw path,
so metric cardinality stays bounded whatever clients send.
"""

from __future__ import annotations

import logging
import re
import time
from typing import Any

from fastapi import FastAPI, Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api.metrics import HTTP_IN_FLIGHT, HTTP_LATENCY, HTTP_REQUESTS
from domain.ids import random_token
from infra.logs import bind_log_context, reset_log_context

access_log = logging.getLogger("tachograph.access")

REQUEST_ID_HEADER = "x-request-id"
_VALID_REQUEST_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")
_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
UNMATCHED = "unmatched"


def request_id_of(scope: Scope) -> str:
    """The client's x-request-id when it is a sane token, else a fresh one."""
    for name, value in scope["headers"]:
        if name == b"x-request-id":
            candidate: str = bytes(value).decode("latin-1")
            if _VALID_REQUEST_ID.fullmatch(candidate):
                return candidate
            break
    return random_token()


class ObservabilityMiddleware:
    """Outermost middleware: counts and times every request, including refused ones."""

    def __init__(self, app: ASGIApp, fastapi_app: FastAPI, access_log: bool = False) -> None:
        self.app = app
        self.fastapi_app = fastapi_app
        self.access_log = access_log
        self._compiled: _Templates | None = None
        self._children: dict[tuple[str, str, int], tuple[Any, Any]] = {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request_id = request_id_of(scope)
        tokens = bind_log_context(
            request_id=request_id, session_id=None, task_id=None, turn_id=None, dispatch_id=None
        )
        header = (REQUEST_ID_HEADER.encode(), request_id.encode())
        status = 500
        started = time.perf_counter()

        async def send_with_id(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                headers = [*message.get("headers", []), header]
                allowed = self._templates().methods(scope["path"]) if status == 405 else []
                if allowed:
                    # Starlette lists only the first matching route's methods; a path served
                    # by several routes (GET and POST /api/tasks) must list them all.
                    headers = [(k, v) for k, v in headers if k.lower() != b"allow"]
                    headers.append((b"allow", ", ".join(allowed).encode()))
                message = {**message, "headers": headers}
            await send(message)

        HTTP_IN_FLIGHT.inc()
        try:
            await self.app(scope, receive, send_with_id)
        finally:
            HTTP_IN_FLIGHT.dec()
            elapsed = time.perf_counter() - started
            method = scope["method"] if scope["method"] in _METHODS else "other"
            route = self._route(scope)
            counter, latency = self._series(method, route, status)
            counter.inc()
            latency.observe(elapsed)
            if self.access_log or status >= 500:
                level = logging.WARNING if status >= 500 else logging.INFO
                access_log.log(
                    level,
                    "%s %s %d",
                    method,
                    route,
                    status,
                    extra={
                        "fields": {
                            "method": method,
                            "route": route,
                            "status": status,
                            "durationMs": round(elapsed * 1000, 2),
                        }
                    },
                )
            reset_log_context(tokens)

    def _series(self, method: str, route: str, status: int) -> tuple[Any, Any]:
        # labels() takes a lock and builds a key on every call; the few series a
        # server ever has are looked up once.
        key = (method, route, status)
        series = self._children.get(key)
        if series is None:
            series = self._children[key] = (
                HTTP_REQUESTS.labels(method, route, str(status)),
                HTTP_LATENCY.labels(method, route),
            )
        return series

    def _route(self, scope: Scope) -> str:
        route = scope.get("route")
        path = getattr(route, "path_format", None) or getattr(route, "path", None)
        if path is None:
            # Refused before routing (401, 413, ...): find the template the path would take.
            path = self._templates().match(scope["path"], scope["method"])
        return str(path or UNMATCHED)

    def _templates(self) -> _Templates:
        if self._compiled is None:
            self._compiled = _Templates(self.fastapi_app.openapi().get("paths", {}))
        return self._compiled


class _Templates:
    """Route templates from the app's own OpenAPI, as regular expressions."""

    def __init__(self, paths: dict[str, Any]) -> None:
        self._routes = [
            (re.compile("^" + re.sub(r"\\{[^/]+?\\}", "[^/]+", re.escape(t)) + "$"), t, ops)
            for t, ops in paths.items()
        ]

    def methods(self, path: str) -> list[str]:
        """Every documented method of the template the path takes."""
        for pattern, _, operations in self._routes:
            if pattern.match(path):
                return sorted(m.upper() for m in operations)
        return []

    def match(self, path: str, method: str) -> str | None:
        fallback = None
        for pattern, template, operations in self._routes:
            if pattern.match(path):
                if method.lower() in operations:
                    return template
                fallback = fallback or template
        return fallback


async def bind_path_ids(request: Request) -> None:
    """App-wide dependency: session and task ids from the path join the log context.

    Async on purpose: it runs in the request's own task, so the ids it binds are seen
    by the endpoint (sync endpoints get a copy of the context in the thread pool).
    """
    params = request.path_params
    ids = {}
    if "session_id" in params:
        ids["session_id"] = params["session_id"]
    if "task_id" in params:
        ids["task_id"] = params["task_id"]
    if ids:
        bind_log_context(**ids)  # reset by the middleware at the end of the request
