"""The OTLP/HTTP receiver: `POST /v1/logs`, `/v1/metrics` and `/v1/traces` (docs/usage.md).

Agent runtimes export their OpenTelemetry here (`OTEL_EXPORTER_OTLP_ENDPOINT` pointing at
Tachograph, the agent token in `OTEL_EXPORTER_OTLP_HEADERS`); the middleware has
authenticated the caller and capped the body as on the hook routes. Of the logs, the
model requests of the runtimes mapped in infra/otlp_usage.py are recorded, each in
the session its hooks created; everything else is taken and ignored, so an exporter
never fails on what it was not asked to leave out. Metrics are taken and ignored: they
repeat the same requests summed (docs/usage.md says which counts); so are traces. Answers follow the
OTLP/HTTP specification, in the request's encoding.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, Final
from uuid import UUID
from weakref import WeakKeyDictionary

from fastapi import FastAPI
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response

from api.auth import bound_session, bound_workspace, principal_of, write_refusal
from api.deps import Collaborators
from api.errors import ApiError
from api.hook_routes import HookRoute, LabelledRoute, hook_header
from api.metrics import OTLP_RECORDS
from api.middleware import BODY, HOOK_BODY_MAX_BYTES
from domain.lifecycle import agent_session_uuid
from domain.model_usage import ReportedRequest
from domain.session import SessionTarget
from domain.workspace import DEFAULT_WORKSPACE
from infra.otlp_usage import MappedLogs, log_record_count, model_requests
from infra.otlp_wire import (
    INVALID_ARGUMENT,
    JSON,
    Encoding,
    OtlpBodyError,
    Signal,
    decode,
    encoding_of,
    inflate,
    status,
    success,
)
from ingest.usage import Placed, UsageRecorded
from services.credentials import Principal

# One export's work per turn of the event loop (per loop: tests run several).
_TURNS: Final[WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock]] = WeakKeyDictionary()


@asynccontextmanager
async def _turn() -> AsyncIterator[None]:
    """Do an export's work, then let the loop run what else is ready before the next.

    Exports arrive from a fleet many at once, and each is a few hundred microseconds of
    the one event loop the hooks share; run back to back, a burst of them kept a hook
    waiting for all of them. Taking turns, a hook's next step waits for one export's at
    most (bench/otlp.py's `beside_hooks`). The wait for the commit is outside the turn.
    """
    loop = asyncio.get_running_loop()
    lock = _TURNS.get(loop)
    if lock is None:
        lock = _TURNS[loop] = asyncio.Lock()
    async with lock:
        yield
        await asyncio.sleep(0)  # still holding the turn: the next export waits behind the hooks


# labels() takes a lock and builds its key on every call: the dozen series are looked
# up once (four counts per export).
_COUNTERS: Final[dict[tuple[Signal, str], Any]] = {}


def _count(signal: Signal, outcome: str, n: int = 1) -> None:
    counter = _COUNTERS.get((signal, outcome))
    if counter is None:
        counter = OTLP_RECORDS.labels(signal=signal, outcome=outcome)
        _COUNTERS[(signal, outcome)] = counter
    if n:
        counter.inc(n)


async def otlp_logs(request: Request) -> Response:
    """An OTLP logs export: the model requests it reports are recorded."""
    return await _export(request, "logs")


async def otlp_metrics(request: Request) -> Response:
    """An OTLP metrics export: read, answered, and not counted (see the module note)."""
    return await _export(request, "metrics")


async def otlp_traces(request: Request) -> Response:
    """An OTLP traces export (Gemini CLI sends one beside its logs): read, answered, and
    not kept, so the exporter has nothing to fail on."""
    return await _export(request, "traces")


@dataclass(frozen=True, slots=True)
class _Taken:
    """An export read and its model requests queued: what its answer is made of."""

    signal: Signal
    encoding: Encoding
    recorded: Awaitable[UsageRecorded]
    records: int  # log records in the export
    mapped: MappedLogs
    refused: int  # requests this caller may not write
    problem: str | None


async def _export(request: Request, signal: Signal) -> Response:
    async with _turn():
        taken = await _take(request, signal)
    if isinstance(taken, Response):
        return taken
    recorded = await taken.recorded
    async with _turn():
        return _answer(taken, recorded)


async def _take(request: Request, signal: Signal) -> _Taken | Response:
    """Read the export and queue what it reports; a Response when there is nothing to
    wait for (a refused body, or a signal that is not kept)."""
    encoding: Encoding = JSON
    try:
        encoding = encoding_of(request.headers.get("content-type"))
        body: bytes | None = request.scope.get(BODY)
        raw = body if body is not None else await request.body()
        payload = decode(
            signal,
            inflate(raw, request.headers.get("content-encoding"), HOOK_BODY_MAX_BYTES),
            encoding,
        )
    except OtlpBodyError as exc:
        _count(signal, "refused")
        return Response(
            status(encoding, INVALID_ARGUMENT, exc.message), exc.status, media_type=encoding
        )
    if signal != "logs":
        _count(signal, "ignored")
        return Response(success(signal, encoding), media_type=encoding)
    c: Collaborators = request.app.state.collaborators
    principal = principal_of(request.scope)
    mapped = model_requests(payload)
    placed, refused, problem = await _place(request, c, principal, mapped.requests)
    recorded = c.usage.submit(placed, principal.actor)
    return _Taken(signal, encoding, recorded, log_record_count(payload), mapped, refused, problem)


def _answer(taken: _Taken, recorded: UsageRecorded) -> Response:
    signal, mapped = taken.signal, taken.mapped
    rejected = mapped.rejected + taken.refused
    _count(signal, "recorded", recorded.recorded)
    _count(signal, "repeated", recorded.repeated)
    _count(signal, "refused", rejected)
    _count(signal, "ignored", max(taken.records - len(mapped.requests) - mapped.rejected, 0))
    answer = success(signal, taken.encoding, rejected, taken.problem or mapped.problem)
    # As on the hook routes: a reader can wait for what this export recorded.
    headers = {} if recorded.position is None else {"x-tachograph-position": str(recorded.position)}
    return Response(answer, media_type=taken.encoding, headers=headers)


async def _place(
    request: Request,
    c: Collaborators,
    principal: Principal,
    requests: Sequence[ReportedRequest],
) -> tuple[list[Placed], int, str | None]:
    """Where each request is recorded, as the hooks place its session: the token's
    session (or x-tachograph-session-id), else the runtime's own session id; refused
    (counted, with why) where the token may not write."""
    headers = request.headers
    explicit = bound_session(principal, hook_header(headers.get("x-tachograph-session-id")))
    named = bound_workspace(
        principal, hook_header(headers.get("x-tachograph-workspace")), "/v1/logs"
    )
    session_of_token: UUID | None = None
    if explicit is not None:
        try:
            session_of_token = UUID(explicit)
        except ValueError:
            raise ApiError(
                422, "validation_error", "x-tachograph-session-id must be a UUID."
            ) from None
    placed: list[Placed] = []
    refused = 0
    problem: str | None = None
    targets: dict[UUID, tuple[SessionTarget, str | None]] = {}
    for reported in requests:
        session_id = session_of_token or agent_session_uuid(
            f"{reported.agent}:{reported.agent_session_id}"
        )
        if session_id not in targets:
            targets[session_id] = await _target(c, principal, session_id)
        target, refusal = targets[session_id]
        if refusal is not None:
            refused += 1
            problem = problem or f"This agent token cannot write to {refusal}."
            continue
        workspace = target.workspace or named or DEFAULT_WORKSPACE
        placed.append(Placed(reported, session_id, workspace))
    return placed, refused, problem


async def _target(
    c: Collaborators, principal: Principal, session_id: UUID
) -> tuple[SessionTarget, str | None]:
    """What the id names (from memory when known, else the log, in a thread), and why
    this caller may not write there (None: it may)."""
    target = c.sessions.known_session_target(session_id)
    if target is None:
        target = await run_in_threadpool(c.sessions.session_target, session_id)
    if target.kind is not None:
        return target, f"{session_id}, which is a {target.kind}, not a session"
    return target, write_refusal(principal, session_id, lambda _: target)


OTLP_ROUTES: Final = (
    HookRoute("/v1/logs", otlp_logs, "usage"),
    HookRoute("/v1/metrics", otlp_metrics, "usage"),
    HookRoute("/v1/traces", otlp_traces, "usage"),
)


def install_otlp_routes(app: FastAPI) -> None:
    """The receiver's routes, ahead of the FastAPI routes (none of its machinery needed)."""
    routes = [
        LabelledRoute(r.path, r.endpoint, methods=["POST"], name=r.endpoint.__name__)
        for r in OTLP_ROUTES
    ]
    app.router.routes[:0] = routes
