"""Authentication and role checks for every request, before any route sees it.

One table decides what each route needs (`required_capability`); the OpenAPI document
states it per operation and tests/test_roles.py holds every route to it. Checks that
depend on the body (an agent token writing only to its own session) are in the hook
routes, through `authorize_session`.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from functools import partial
from typing import Protocol
from uuid import UUID

from fastapi import FastAPI, Request
from starlette.concurrency import run_in_threadpool
from starlette.types import ASGIApp, Receive, Scope, Send

from api.errors import ApiError
from api.metrics import FORBIDDEN, UNAUTHORIZED
from api.middleware import OTLP_PATH, PRINCIPAL, RUNTIME_HOOK_PATH, send_error
from domain.credentials import ADMINISTER, HOOKS, NEEDED_ROLE, OPERATE, READ
from domain.session import SessionTarget
from services.credentials import (
    CATCH_UP_MIN_INTERVAL_S,
    UNKNOWN,
    CredentialCache,
    Principal,
    Refused,
)

_EVENTS = re.compile(r"^/api/sessions/[^/]+/events$")
_READS = frozenset({"GET", "HEAD", "OPTIONS"})
# Administration: who may change policy, register directories and hold credentials.
_ADMIN_PREFIXES = ("/api/keys", "/api/workspaces", "/api/settings/autonomy")


def required_capability(method: str, path: str) -> str | None:
    """What a request needs; None for the public surface (page, docs, /metrics, Coder)."""
    if RUNTIME_HOOK_PATH.match(path):
        return HOOKS
    if path != "/api" and not path.startswith("/api/"):
        # The OTLP receiver takes the agent's token; /hooks/coder verifies its own JWT.
        return HOOKS if OTLP_PATH.match(path) else None
    if path.startswith("/api/keys"):
        return ADMINISTER  # listing credentials is administration too
    if method in _READS:
        return READ
    if _EVENTS.match(path) or path == "/api/autonomy/signals":
        return HOOKS
    if path.startswith(_ADMIN_PREFIXES):
        return ADMINISTER
    return OPERATE


class AuthMiddleware:
    """Resolve the caller's credential; refuse 401 or 403 before the app sees the request."""

    def __init__(self, app: ASGIApp, fastapi_app: FastAPI, credentials: CredentialCache) -> None:
        self.app = app
        self.fastapi_app = fastapi_app
        self.credentials = credentials
        self._templates: list[tuple[re.Pattern[str], str]] | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        needed = required_capability(scope["method"], scope["path"])
        if needed is None:
            await self.app(scope, receive, send)
            return
        presented = _header(scope, b"x-tachograph-key")
        found = self.credentials.authenticate(presented)
        if found is UNKNOWN:
            found = await self._caught_up(presented)
        if isinstance(found, Refused):
            UNAUTHORIZED.labels(reason=found.reason).inc()
            await send_error(send, 401, "unauthorized", found.message, reason=found.reason)
            return
        if not found.can(needed):
            role = NEEDED_ROLE[needed]
            FORBIDDEN.labels(route=self._route(scope), role=found.role).inc()
            who = f"the key {found.label!r}" if found.label else "this caller"
            await send_error(
                send,
                403,
                "forbidden",
                f"This route needs the {role} role; {who} has the {found.role} role.",
                requiredRole=role,
                role=found.role,
            )
            return
        scope[PRINCIPAL] = found
        await self.app(scope, receive, send)

    async def _caught_up(self, presented: bytes | None) -> Principal | Refused:
        """An unknown secret, perhaps issued a moment ago on another replica or process:
        read the changes once, or wait for the next read another request makes.

        Reads stay at most one per CATCH_UP_MIN_INTERVAL_S, so guessing keys never turns
        into a query per request; a request that finds the last read too recent waits
        for the next turn (at most two) instead of being refused at once, which refused
        a key issued just after another fresh key was first used.
        """
        for _ in range(2):
            if self.credentials.may_catch_up():
                await run_in_threadpool(self.credentials.refresh)
                return self.credentials.authenticate(presented)
            await asyncio.sleep(CATCH_UP_MIN_INTERVAL_S)
            found = self.credentials.authenticate(presented)  # another request's read
            if found is not UNKNOWN:
                return found
        return UNKNOWN

    def _route(self, scope: Scope) -> str:
        """The route template, as the other metrics label requests (refusals only)."""
        if self._templates is None:
            self._templates = [
                (re.compile("^" + re.sub(r"\{\w+\}", "[^/]+", path) + "$"), path)
                for path in self.fastapi_app.openapi()["paths"]
            ]
        for pattern, template in self._templates:
            if pattern.match(scope["path"]):
                return template
        return "unmatched"


def principal_of(scope: Scope) -> Principal:
    """The caller the middleware established (every protected route has one)."""
    principal: Principal = scope[PRINCIPAL]
    return principal


def request_principal(request: Request) -> Principal:
    return principal_of(request.scope)


def bound_session(principal: Principal, header: str | None) -> str | None:
    """The session a hook names, filling in a session-bound token's own session."""
    if header is None and principal.binding.session_id is not None:
        return principal.binding.session_id
    return header


def bound_workspace(principal: Principal, header: str | None, route: str) -> str | None:
    """The workspace a hook names; a workspace-bound token's own, or 403 for another."""
    own = principal.binding.workspace_id
    if own is None:
        return header
    if header is not None and header != own:
        raise _forbidden_binding(principal, f"workspace {header!r}", route)
    return own


class SessionTargets(Protocol):
    """Where a write's session id is looked up (bootstrap.Services)."""

    def session_target(self, session_id: UUID) -> SessionTarget:
        """What the id names, from the log when not remembered."""

    def known_session_target(self, session_id: UUID) -> SessionTarget | None:
        """What the id names, from memory alone; None when not remembered."""


def write_refusal(
    principal: Principal, session_id: UUID, target_of: Callable[[UUID], SessionTarget]
) -> str | None:
    """What this caller may not write hook events into, None when it may.

    A session-bound token writes only to its session (a Session when issued). A
    workspace-bound one writes only to Sessions of its workspace, or to an id nothing
    holds yet, which a hook route creates in its workspace (the events route answers
    404): never to another aggregate's id, which would file events under a task or a
    dispatch outside any workspace. Other callers are not bound.
    """
    binding = principal.binding
    if binding.session_id is not None:
        return None if str(session_id) == binding.session_id else f"session {session_id}"
    if binding.workspace_id is None:
        return None
    target = target_of(session_id)
    if target.kind is not None:
        return f"{session_id}, which is a {target.kind}, not a session"
    if target.workspace is not None and target.workspace != binding.workspace_id:
        return f"session {session_id}, which is in another workspace"
    return None


def authorize_session(
    principal: Principal,
    session_id: UUID,
    target_of: Callable[[UUID], SessionTarget],
    route: str,
) -> None:
    """write_refusal, as the 403 naming what the token is bound to and what is wrong."""
    refused = write_refusal(principal, session_id, target_of)
    if refused is not None:
        raise _forbidden_binding(principal, refused, route)


async def authorize_session_in_loop(
    principal: Principal, session_id: UUID, targets: SessionTargets, route: str
) -> None:
    """authorize_session from async code. A workspace-bound token's session is checked
    against the sessions this process remembers (no read, no thread for a known one);
    only an id not looked up before is read from the log, in a thread."""
    if principal.binding.workspace_id is None:
        authorize_session(principal, session_id, targets.session_target, route)
        return
    known = targets.known_session_target(session_id)
    if known is None:
        await run_in_threadpool(
            authorize_session, principal, session_id, targets.session_target, route
        )
        return
    authorize_session(principal, session_id, partial(_remembered, known), route)


def _remembered(target: SessionTarget, session_id: UUID) -> SessionTarget:
    return target


def _forbidden_binding(principal: Principal, what: str, route: str) -> ApiError:
    binding = principal.binding
    own = (
        f"session {binding.session_id}"
        if binding.session_id is not None
        else f"workspace {binding.workspace_id!r}"
    )
    FORBIDDEN.labels(route=route, role=principal.role).inc()
    return ApiError(
        403,
        "forbidden",
        f"This agent token is bound to {own}; it cannot write to {what}.",
        requiredRole=principal.role,
        role=principal.role,
    )


def _header(scope: Scope, wanted: bytes) -> bytes | None:
    for name, value in scope["headers"]:
        if name == wanted:
            return bytes(value)
    return None
