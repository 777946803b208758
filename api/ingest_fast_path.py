"""The hook routes without the framework's per-request machinery.

`POST /api/sessions/{id}/events` and Claude Code's native `POST /hooks/claude` are
called on every tool call of every agent, and on two cores FastAPI's routing,
dependency solving and response handling cost more than the group-committed append
itself. This innermost middleware answers them for a session this process already
knows: the same validation, the same gateway calls, the same response bytes and
headers as the routes. Without handlers the event joins the group commit; with
handlers to run (or a retried eventId) the gateway's blocking path runs in the
thread pool, as the routes run it, so the body is never parsed twice.

Everything else falls through, untouched, to the FastAPI routes, which stay the one
documented surface and give every other canonical answer: 4xx errors for bad input,
404s, and the first event of a session this process has not seen yet (which the
Claude route creates). A request that falls through is handled exactly as if this
middleware were absent.
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any
from uuid import UUID

from eventsourcing.persistence import IntegrityError
from fastapi import FastAPI
from pydantic import ValidationError
from starlette.concurrency import run_in_threadpool
from starlette.types import ASGIApp, Receive, Scope, Send

from api.adapters.claude_code import decision_to_claude
from api.auth import bound_session, may_write_session, principal_of
from api.errors import ApiError
from api.input_limits import TEXT_CHECKED, plainly_clean
from api.middleware import replaying
from api.routes.adapters import claude_hook_event, claude_note, hook_header
from api.routes.hooks import start_in_loop, to_ingest
from api.schemas import LifecycleEvent
from bootstrap import Services
from domain.gateway import IngestEvent, IngestResult
from infra.logs import bind_log_context
from services.credentials import Principal

ROUTE = "/api/sessions/{session_id}/events"
CLAUDE_ROUTE = "/hooks/claude"
# Only the canonical spelling of the id; any other the route may accept goes to the route.
_PATH = re.compile(
    r"/api/sessions/([0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12})"
    r"/events"
)
_JSON_TYPES = (b"application/json", b"application/json; charset=utf-8")


class _RouteLabel:
    """What the observability middleware labels metrics by (a matched route's path)."""

    def __init__(self, path_format: str) -> None:
        self.path_format = path_format


_ROUTE_LABEL = _RouteLabel(ROUTE)
_CLAUDE_LABEL = _RouteLabel(CLAUDE_ROUTE)
# An answer: the JSON body, and the result whose position headers go with it.
_Answer = tuple[object, IngestResult]


class IngestFastPath:
    """Answers hot-path ingests itself; passes every other request through."""

    def __init__(self, app: ASGIApp, fastapi_app: FastAPI) -> None:
        self.app = app
        self.fastapi_app = fastapi_app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        path = scope["path"]
        attempt: Callable[[bytes], Awaitable[_Answer | None]]
        if path == CLAUDE_ROUTE:
            principal = principal_of(scope)  # both routes are authenticated (api/auth.py)
            explicit = bound_session(
                principal, hook_header(_header(scope, b"x-tachograph-session-id"))
            )
            attempt, label = partial(self._try_claude, principal, explicit), _CLAUDE_LABEL
        elif (match := _PATH.fullmatch(path)) is not None:
            principal = principal_of(scope)
            attempt, label = partial(self._try, principal, match.group(1)), _ROUTE_LABEL
        else:
            await self.app(scope, receive, send)
            return
        if principal.binding.workspace_id is not None or principal.binding.policy is not None:
            # The routes check a workspace binding (which may need the store) and apply
            # a credential's fixed tool policy.
            await self.app(scope, receive, send)
            return
        if scope["query_string"] or _content_type(scope) not in _JSON_TYPES:
            await self.app(scope, receive, send)
            return
        first = await receive()
        whole = first["type"] == "http.request" and not first.get("more_body", False)
        answer = await attempt(first.get("body", b"")) if whole else None
        if answer is None:
            await self.app(scope, replaying(first, receive), send)
            return
        scope["route"] = label
        await _answer(send, *answer)

    async def _try(self, principal: Principal, raw_id: str, body: bytes) -> _Answer | None:
        try:
            session_id = UUID(raw_id)
            # The model's text checks walk the whole body; a glance at the bytes can
            # prove most bodies clean, so that walk runs only when it could find something.
            context = {TEXT_CHECKED: True} if plainly_clean(body) else None
            payload = LifecycleEvent.model_validate(json.loads(body), context=context)
        except (ValueError, ValidationError):
            return None  # the route answers with the canonical 422
        result = await self._ingest(principal, session_id, to_ingest(payload))
        return None if result is None else (result.decision(), result)

    async def _try_claude(
        self, principal: Principal, explicit_session: str | None, body: bytes
    ) -> _Answer | None:
        try:
            session_id, event = claude_hook_event(body, explicit_session)
        except ApiError:
            return None  # the route answers with the canonical 400 or 422
        result = await self._ingest(principal, session_id, event, annotate=claude_note(event))
        if result is None:
            return None
        answer, _ = decision_to_claude(event.event, result.decision())
        return answer, result

    async def _ingest(
        self,
        principal: Principal,
        session_id: UUID,
        event: IngestEvent,
        annotate: Callable[[dict[str, Any]], str | None] | None = None,
    ) -> IngestResult | None:
        """The gateway's answer for a session this process knows; None for any other."""
        services: Services = self.fastapi_app.state.services
        gateway = services.gateway
        if not gateway.knows_session(session_id):
            return None  # the route looks the session up (creates it, or answers 404)
        if not may_write_session(principal, session_id, services.session_workspace):
            return None  # the route answers the 403
        bind_log_context(session_id=session_id)  # reset by the observability middleware
        actor = principal.actor
        started = start_in_loop(
            gateway, session_id, event, actor, wake_once_per_batch=True, annotate=annotate
        )
        if started is not None:
            try:
                return await started
            except IntegrityError:
                pass  # a retried eventId: the blocking path answers with the stored decision
        # Handlers to run, or a retried eventId: the route's blocking path, run as it runs it.
        return await run_in_threadpool(
            partial(gateway.ingest, session_id, event, actor=actor, annotate=annotate)
        )


def _header(scope: Scope, wanted: bytes) -> str | None:
    """The first value of a header, decoded as Starlette decodes it."""
    for name, value in scope["headers"]:
        if name == wanted:
            return bytes(value).decode("latin-1")
    return None


def _content_type(scope: Scope) -> bytes | None:
    value = _header(scope, b"content-type")
    return None if value is None else value.lower().encode("latin-1")


async def _answer(send: Send, content: object, result: IngestResult) -> None:
    # Byte for byte what the routes' JSONResponse renders.
    body = json.dumps(
        content, ensure_ascii=False, allow_nan=False, indent=None, separators=(",", ":")
    ).encode()
    headers = [
        (b"content-length", str(len(body)).encode()),
        (b"content-type", b"application/json"),
    ]
    if result.position is not None:
        headers.append((b"x-tachograph-position", str(result.position).encode()))
    if not result.recorded:
        headers.append((b"x-tachograph-recorded", b"false"))
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": body})
