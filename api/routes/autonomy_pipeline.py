"""The learning loop at a glance: signals in, decisions made, lessons, reverts, deliveries."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query

from api.autonomy_schemas import AgentId
from api.deps import Consistent, StoreDep
from api.input_limits import StrictJSONRoute
from projections.pipeline import pipeline_summary

router = APIRouter(prefix="/api/autonomy", tags=["autonomy"], route_class=StrictJSONRoute)


@router.get("/pipeline")
def pipeline(
    store: StoreDep,
    _: Consistent,
    agent_id: Annotated[AgentId | None, Query(alias="agentId")] = None,
) -> dict[str, Any]:
    """Counts with their latest times: signals by kind and status, decisions by strategy,
    revisions learned, reverts, deliveries made (of one agent with `agentId`)."""
    return pipeline_summary(store, agent_id)
