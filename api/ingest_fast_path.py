"""The ingest route without the framework's per-request machinery.

`POST /api/sessions/{id}/events` is called on every tool call of every agent, and on
two cores FastAPI's routing, dependency solving and response handling cost more than
the group-committed append itself. This innermost middleware answers ingests for a
session this process already knows: the same validation model, the same gateway calls,
the same response bytes and headers as the route. Without handlers the event joins
the group commit; with handlers to run (or a retried eventId) the gateway's blocking
path runs in the thread pool, as the route runs it, so the body is never parsed twice.

Everything else falls through, untouched, to the FastAPI route, which stays the one
documented surface and gives every other canonical answer: 422s for bad input, 404s,
and the first event of a session this process has not seen yet. A request that falls
through is handled exactly as if this middleware were absent.
"""

from __future__ import annotations

import json
import re
from uuid import UUID

from eventsourcing.persistence import IntegrityError
from fastapi import FastAPI
from pydantic import ValidationError
from starlette.concurrency import run_in_threadpool
from starlette.types import ASGIApp, Receive, Scope, Send

from api.bootstrap import Services
from api.deps import actor_label
from api.input_limits import TEXT_CHECKED, plainly_clean
from api.middleware import replaying
from api.routes.hooks import start_in_loop, to_ingest
from api.schemas import LifecycleEvent
from domain.gateway import IngestResult
from infra.logs import bind_log_context

ROUTE = "/api/sessions/{session_id}/events"
# Only the canonical spelling of the id; any other the route may accept goes to the route.
_PATH = re.compile(
    r"/api/sessions/([0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12})"
    r"/events"
)
_JSON_TYPES = (b"application/json", b"application/json; charset=utf-8")


class _RouteLabel:
    path_format = ROUTE


_ROUTE_LABEL = _RouteLabel()


class IngestFastPath:
    """Answers hot-path ingests itself; passes every other request through."""

    def __init__(self, app: ASGIApp, fastapi_app: FastAPI) -> None:
        self.app = app
        self.fastapi_app = fastapi_app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        match = _PATH.fullmatch(scope["path"])
        if match is None or scope["query_string"] or _content_type(scope) not in _JSON_TYPES:
            await self.app(scope, receive, send)
            return
        first = await receive()
        whole = first["type"] == "http.request" and not first.get("more_body", False)
        result = await self._try(match.group(1), first.get("body", b"")) if whole else None
        if result is None:
            await self.app(scope, replaying(first, receive), send)
            return
        scope["route"] = _ROUTE_LABEL  # what the observability middleware labels metrics by
        await _answer(send, result)

    async def _try(self, raw_id: str, body: bytes) -> IngestResult | None:
        try:
            session_id = UUID(raw_id)
            # The model's text checks walk the whole body; a glance at the bytes can
            # prove most bodies clean, so that walk runs only when it could find something.
            context = {TEXT_CHECKED: True} if plainly_clean(body) else None
            payload = LifecycleEvent.model_validate(json.loads(body), context=context)
        except (ValueError, ValidationError):
            return None  # the route answers with the canonical 422
        services: Services = self.fastapi_app.state.services
        gateway = services.gateway
        if not gateway.knows_session(session_id):
            return None  # the route looks the session up (or answers 404)
        bind_log_context(session_id=session_id)  # reset by the observability middleware
        actor = actor_label(services)
        event = to_ingest(payload)
        started = start_in_loop(gateway, session_id, event, actor, wake_once_per_batch=True)
        if started is not None:
            try:
                return await started
            except IntegrityError:
                pass  # a retried eventId: the blocking path answers with the stored decision
        # Handlers to run, or a retried eventId: the route's blocking path, run as it runs it.
        return await run_in_threadpool(gateway.ingest, session_id, event, actor=actor)


def _content_type(scope: Scope) -> bytes | None:
    for name, value in scope["headers"]:
        if name == b"content-type":
            return bytes(value).lower()
    return None


async def _answer(send: Send, result: IngestResult) -> None:
    # Byte for byte what the route's JSONResponse renders.
    content = json.dumps(
        result.decision(), ensure_ascii=False, allow_nan=False, indent=None, separators=(",", ":")
    ).encode()
    headers = [
        (b"content-length", str(len(content)).encode()),
        (b"content-type", b"application/json"),
    ]
    if result.position is not None:
        headers.append((b"x-tachograph-position", str(result.position).encode()))
    if not result.recorded:
        headers.append((b"x-tachograph-recorded", b"false"))
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": content})
