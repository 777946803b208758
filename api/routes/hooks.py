"""Lifecycle ingestion and the per-session hook audit."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from contextlib import suppress
from typing import Any, Literal
from uuid import UUID

from eventsourcing.persistence import IntegrityError
from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool

from api.auth import authorize_session_in_loop, request_principal
from api.deps import Consistent, ServicesDep
from api.schemas import LifecycleEvent
from bootstrap import Services
from domain.errors import NotFound
from domain.gateway import HookGateway, IngestEvent, IngestResult, ToolPolicy
from projections.hook_audit import group_by_turn, session_hook_records
from projections.sessions import session_exists
from services.tool_policy import tool_policy_for

router = APIRouter(prefix="/api/sessions", tags=["hooks"])
EVENTS_ROUTE = "/api/sessions/{session_id}/events"


def to_ingest(body: LifecycleEvent) -> IngestEvent:
    return IngestEvent(
        event=body.event,
        event_id=body.eventId,
        turn_id=body.turnId,
        agent=body.agent,
        agent_session_id=body.agentSessionId,
        tool_name=body.toolName,
        tool_call_id=body.toolCallId,
        tool_input=body.toolInput,
        tool_response=body.toolResponse,
        prompt=body.prompt,
        last_assistant_message=body.lastAssistantMessage,
        subagent_id=body.subagentId,
        model=body.model,
        detail=body.detail or {},
    )


def start_in_loop(
    gateway: HookGateway,
    session_id: UUID,
    event: IngestEvent,
    actor: str,
    *,
    wake_once_per_batch: bool = False,
    annotate: Callable[[dict[str, Any]], str | None] | None = None,
    policy: ToolPolicy | None = None,
) -> asyncio.Future[IngestResult] | None:
    """The gateway's non-blocking ingest as a future of this event loop; None if it blocks.

    The gateway's reply is set on the future directly when it arrives in the loop's
    thread (with `wake_once_per_batch`, the group commit delivers there, one wake-up
    per batch) and handed over thread-safely when it arrives anywhere else. A retried
    eventId fails the future with IntegrityError.
    """
    loop = asyncio.get_running_loop()
    waiter: asyncio.Future[IngestResult] = loop.create_future()
    loop_thread = threading.get_ident()

    def reply(outcome: IngestResult | IntegrityError) -> None:
        if threading.get_ident() != loop_thread:
            with suppress(RuntimeError):  # the loop is closed: nobody waits any more
                loop.call_soon_threadsafe(reply, outcome)
            return
        if waiter.done():
            return  # the request was cancelled (client gone)
        if isinstance(outcome, IntegrityError):
            waiter.set_exception(outcome)
        else:
            waiter.set_result(outcome)

    deliver = loop.call_soon_threadsafe if wake_once_per_batch else None
    started = gateway.start_ingest(
        session_id,
        event,
        actor=actor,
        reply=reply,
        deliver=deliver,
        annotate=annotate,
        policy=policy,
    )
    if not started:
        return None
    return waiter


def acknowledge(response: Response, result: IngestResult) -> None:
    """Hook routes answer once the decision is durable: position header, no projection wait."""
    if result.position is not None:
        response.headers["x-tachograph-position"] = str(result.position)
    if not result.recorded:
        # The decision still stands (recording failures never change it), but the
        # event is not acknowledged: say so, so the client may retry with its eventId.
        response.headers["x-tachograph-recorded"] = "false"


@router.post("/{session_id}/events", response_model=None)
async def ingest_event(session_id: UUID, body: LifecycleEvent, request: Request) -> JSONResponse:
    """Record a lifecycle event from an agent runtime and return the combined hook decision."""
    # async on purpose: the hot path (known session, no handlers) awaits the group
    # commit without occupying a worker thread; anything that blocks goes to the pool.
    # No Depends() here either: FastAPI's per-request dependency solving was ~10% of
    # this route's CPU under load.
    services: Services = request.app.state.services
    principal = request_principal(request)
    await authorize_session_in_loop(principal, session_id, services.session_workspace, EVENTS_ROUTE)
    actor = principal.actor
    policy = tool_policy_for(principal)
    gateway = services.gateway
    event = to_ingest(body)
    started = start_in_loop(gateway, session_id, event, actor, policy=policy)
    result: IngestResult | None = None
    if started is not None:
        try:
            result = await started
        except IntegrityError:
            result = None  # a retried eventId: the blocking path returns the stored decision
    if result is None:
        result = await run_in_threadpool(
            _ingest_blocking, services, session_id, event, actor, policy
        )
    response = JSONResponse(result.decision())
    acknowledge(response, result)
    return response


def _ingest_blocking(
    services: Services,
    session_id: UUID,
    event: IngestEvent,
    actor: str,
    policy: ToolPolicy | None,
) -> IngestResult:
    services.gateway.require_session(session_id)
    return services.gateway.ingest(session_id, event, actor=actor, policy=policy)


def _require_visible(services: Services, session_id: UUID) -> None:
    if not session_exists(services.store, str(session_id)):
        raise NotFound(f"Session {session_id} does not exist.")


@router.get("/{session_id}/hooks")
def session_hooks(
    session_id: UUID,
    services: ServicesDep,
    _: Consistent,
    groupBy: Literal["turn"] | None = None,
) -> dict[str, Any]:
    """The latest 500 hook audit records of the session, oldest first (or grouped per turn)."""
    _require_visible(services, session_id)
    records = session_hook_records(services.store, str(session_id))
    if groupBy == "turn":
        return {"turns": group_by_turn(records)}
    return {"items": records}
