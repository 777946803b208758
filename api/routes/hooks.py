"""Lifecycle ingestion and the per-session hook audit."""

from __future__ import annotations

from typing import Any, Literal
from uuid import UUID

from fastapi import APIRouter, Request
from starlette.responses import Response

from api.auth import request_principal
from api.deps import Consistent, ServicesDep
from api.hook_calls import answer_events
from api.schemas import LifecycleEventBody
from bootstrap import Services
from domain.errors import NotFound
from projections.hook_audit import group_by_turn, session_hook_records
from projections.sessions import session_exists

router = APIRouter(prefix="/api/sessions", tags=["hooks"])

_BODY = {
    "requestBody": {
        "required": True,
        "content": {"application/json": {"schema": LifecycleEventBody.model_json_schema()}},
    }
}


@router.post("/{session_id}/events", response_model=None, openapi_extra=_BODY)
async def ingest_event(session_id: UUID, request: Request) -> Response:
    """Record a lifecycle event from an agent runtime and return the combined hook decision."""
    # async, and no Depends(): the hot path awaits the group commit without a worker
    # thread, and FastAPI's per-request dependency solving was ~10% of its CPU.
    services: Services = request.app.state.services
    return await answer_events(
        services, request_principal(request), session_id, await request.body()
    )


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
