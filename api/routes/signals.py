"""Signal routes: record (deduplicated), list bounded evidence, ignore, retry."""

from __future__ import annotations

from typing import Annotated, Any
from uuid import UUID

from fastapi import APIRouter, Query, Response

from api.auth import authorize_session
from api.autonomy_schemas import AgentId, SignalCreate, SignalStatus
from api.deps import ActorDep, Consistent, PrincipalDep, ServicesDep, committed
from api.input_limits import StrictJSONRoute
from api.routes.autonomy_settings import autonomy_of
from bootstrap import Services
from domain.errors import NotFound
from projections.signals import get_signal, list_signals

router = APIRouter(prefix="/api/autonomy/signals", tags=["autonomy"], route_class=StrictJSONRoute)


def read_signal(services: Services, signal_id: UUID) -> dict[str, Any]:
    row = get_signal(services.store, str(signal_id))
    if row is None:
        raise NotFound(f"Signal {signal_id} does not exist.")
    return row


SIGNALS_ROUTE = "/api/autonomy/signals"


@router.post("", status_code=201)
def record_signal(
    body: SignalCreate, services: ServicesDep, principal: PrincipalDep, response: Response
) -> dict[str, Any]:
    """Record evidence of one agent turn; a repeat of (agentId, traceId, kind) answers 200."""
    bound = principal.binding.session_id
    session_id = body.sessionId or (UUID(bound) if bound is not None else None)
    if session_id is not None:
        authorize_session(principal, session_id, services.session_workspace, SIGNALS_ROUTE)
    actor = principal.actor
    recorded, created = autonomy_of(services).signals.record(
        body.agentId,
        body.traceId,
        body.kind,
        body.goal,
        body.outcome,
        body.failure,
        body.failureClass,
        session_id,
        actor,
        turn_id=body.turnId,
    )
    position = recorded.position
    if not created:
        # The original may have been recorded by another process a moment ago: read at the
        # log head so the answer always shows it.
        response.status_code = 200
        position = services.app.recorder.max_notification_id()
    committed(services, response, position)
    return read_signal(services, recorded.aggregate_id)


@router.get("")
def signals(
    services: ServicesDep,
    _: Consistent,
    status: SignalStatus | None = None,
    agent_id: Annotated[AgentId | None, Query(alias="agentId")] = None,
    limit: Annotated[int, Query(ge=1, le=200)] = 200,
) -> dict[str, Any]:
    """Recent signals with their (redacted, bounded) evidence, newest first."""
    return {"items": list_signals(services.store, status=status, agent_id=agent_id, limit=limit)}


@router.get("/{signal_id}")
def signal(signal_id: UUID, services: ServicesDep, _: Consistent) -> dict[str, Any]:
    """One signal."""
    return read_signal(services, signal_id)


@router.post("/{signal_id}/ignore")
def ignore_signal(
    signal_id: UUID, services: ServicesDep, actor: ActorDep, response: Response
) -> dict[str, Any]:
    """Pending or dead-letter → ignored; any other state → 409."""
    recorded = autonomy_of(services).signals.ignore(signal_id, actor)
    committed(services, response, recorded.position)
    return read_signal(services, signal_id)


@router.post("/{signal_id}/retry")
def retry_signal(
    signal_id: UUID, services: ServicesDep, actor: ActorDep, response: Response
) -> dict[str, Any]:
    """Dead-letter → pending, restarting from attempt 0; any other state → 409."""
    recorded = autonomy_of(services).signals.retry(signal_id, actor)
    committed(services, response, recorded.position)
    return read_signal(services, signal_id)
