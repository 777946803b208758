"""Lifecycle ingestion and the per-session hook audit."""

from __future__ import annotations

import asyncio
from typing import Any, Literal
from uuid import UUID

from eventsourcing.persistence import IntegrityError
from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool

from api.bootstrap import Services
from api.deps import Consistent, ServicesDep, actor_label
from api.schemas import LifecycleEvent
from domain.errors import NotFound
from domain.gateway import IngestEvent, IngestResult
from projections.hook_audit import group_by_turn, session_hook_records
from projections.sessions import session_exists

router = APIRouter(prefix="/api/sessions", tags=["hooks"])


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
    actor = actor_label(services)
    gateway = services.gateway
    event = to_ingest(body)
    started = gateway.start_ingest(session_id, event, actor=actor)
    result: IngestResult | None = None
    if started is not None:
        try:
            result = await asyncio.wrap_future(started)
        except IntegrityError:
            result = None  # a retried eventId: the blocking path returns the stored decision
    if result is None:
        result = await run_in_threadpool(_ingest_blocking, services, session_id, event, actor)
    response = JSONResponse(result.decision())
    acknowledge(response, result)
    return response


def _ingest_blocking(
    services: Services, session_id: UUID, event: IngestEvent, actor: str
) -> IngestResult:
    services.gateway.require_session(session_id)
    return services.gateway.ingest(session_id, event, actor=actor)


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
