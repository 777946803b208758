"""The live stream route: Server-Sent Events of read-model rows, in log order."""

from __future__ import annotations

import json
import logging
import signal
import threading
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from functools import partial
from types import FrameType
from typing import Annotated, Any

from fastapi import APIRouter, FastAPI, Header, Query, Request
from fastapi.sse import EventSourceResponse, format_sse_event
from starlette.concurrency import run_in_threadpool
from starlette.responses import StreamingResponse

from api.deps import Collaborators, CredentialsDep
from api.errors import DATABASE_DOWN, ApiError
from api.input_limits import MAX_POSITION, StrictJSONRoute
from api.metrics import UNAUTHORIZED
from services.credentials import Refused
from services.live_stream import LiveStream, Message, Reads

log = logging.getLogger(__name__)

KEEPALIVE = b": keep-alive\n\n"
# How soon a client reconnects after the stream ends (a restart, a deploy).
RETRY = b"retry: 2000\n\n"
EVENTS = (
    "`session.updated`, `task.updated`, `hook.denied`, `approval.requested`, `approval.decided`; "
    "last, `unauthorized` when the caller's key is revoked or expires while it is open"
)


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    """One LiveStream for the app, ended when the server is told to stop."""
    wired: Collaborators = app.state.collaborators
    live = LiveStream(wired.app, wired.runner, Reads(wired.store, wired.settings.no_signal_grace_s))
    app.state.live_stream = live
    restore = _before_exit_signals(live.close)
    try:
        yield
    finally:
        live.close()
        restore()


router = APIRouter(prefix="/api", tags=["stream"], lifespan=lifespan, route_class=StrictJSONRoute)


@router.get(
    "/stream",
    # Not EventSourceResponse: FastAPI would take the route for a generator of events.
    response_class=StreamingResponse,
    responses={
        200: {
            "description": f"Events {EVENTS}; `data` is the changed row as the GET routes "
            "show it, `id` the log position.",
            "content": {"text/event-stream": {"schema": {"type": "string"}}},
            "headers": {
                "x-tachograph-position": {
                    "description": "The log position the stream continues after.",
                    "schema": {"type": "integer"},
                }
            },
        }
    },
)
async def live_stream(
    request: Request,
    credentials: CredentialsDep,
    after: Annotated[int | None, Query(ge=0, le=MAX_POSITION)] = None,
    last_event_id: Annotated[
        int | None, Header(alias="last-event-id", ge=0, le=MAX_POSITION)
    ] = None,
) -> EventSourceResponse:
    """Live changes as Server-Sent Events; resume after `Last-Event-ID` (or `?after=`)."""
    live: LiveStream = request.app.state.live_stream
    head = await run_in_threadpool(live.head)
    named = [
        (n, v) for n, v in (("after", after), ("Last-Event-ID", last_event_id)) if v is not None
    ]
    # A reconnecting EventSource sends its Last-Event-ID beside the ?after= it started with.
    start = max((v for _, v in named), default=head)
    if start > head:
        field = next(n for n, v in named if v == start)
        raise ApiError(
            422,
            "position_not_in_log",
            f"{field} {start} is beyond the end of the log ({head}); "
            "resume from a position the stream sent.",
            field=field,
            position=head,
        )
    presented = request.headers.get("x-tachograph-key")
    key = presented.encode("latin-1") if presented is not None else None
    return EventSourceResponse(
        _sse(live, start, request, partial(credentials.recheck, key)),
        headers={
            "cache-control": "no-cache",
            "x-accel-buffering": "no",  # proxies (nginx) must pass each message on at once
            "x-tachograph-position": str(start),
        },
    )


async def _sse(
    live: LiveStream, after: int, request: Request, refused: Callable[[], Refused | None]
) -> AsyncIterator[bytes]:
    yield RETRY
    refusal: Refused | None = None

    async def ended() -> bool:
        # The credential is checked again every poll (in memory): a key revoked on any
        # replica, or past its expiry, stops delivering within a poll of the cache
        # seeing it (services/credentials.py follows every replica's revocations).
        nonlocal refusal
        refusal = refused()
        return refusal is not None or await request.is_disconnected()

    try:
        async for batch in live.follow(after, ended):
            yield _encode(batch) if batch else KEEPALIVE
    except DATABASE_DOWN as exc:
        # The answer has started: end it, and the client reconnects from its last id.
        log.warning("live stream ended, database unavailable: %s", type(exc).__name__)
    if refusal is not None:
        UNAUTHORIZED.labels(reason=refusal.reason).inc()
        # Said once, then the stream ends; the reconnect is answered 401 (EventSource
        # stops there).
        yield format_sse_event(
            event="unauthorized",
            data_str=json.dumps(
                {"error": "unauthorized", "reason": refusal.reason, "message": refusal.message}
            ),
        )


def _encode(batch: Sequence[Message]) -> bytes:
    return b"".join(
        format_sse_event(data_str=m.encode(), event=m.event, id=None if m.id is None else str(m.id))
        for m in batch
    )


def _before_exit_signals(action: Callable[[], None]) -> Callable[[], None]:
    """Run `action` on SIGTERM and SIGINT, then the handler they had (the server's).

    On those signals uvicorn stops accepting connections and waits, without a time
    limit, for every open response to finish before it shuts the app down: with one
    page open, a SIGTERM never completed. Returns what puts the previous handlers back.
    """
    if threading.current_thread() is not threading.main_thread():
        return lambda: None  # only the main thread handles signals (in-process test clients)
    previous: dict[int, Any] = {}

    def handler(signum: int, frame: FrameType | None) -> None:
        action()
        chained = previous[signum]
        if callable(chained):
            chained(signum, frame)
        elif chained == signal.SIG_DFL:
            signal.signal(signum, signal.SIG_DFL)
            signal.raise_signal(signum)

    for signum in (signal.SIGTERM, signal.SIGINT):
        previous[signum] = signal.signal(signum, handler)

    def restore() -> None:
        for signum, chained in previous.items():
            if signal.getsignal(signum) is handler:
                signal.signal(signum, chained)

    return restore
