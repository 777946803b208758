"""Model usage the runtimes reported, summed (GET /api/usage, GET /api/usage/daily)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query

from api.deps import Consistent, StoreDep
from api.input_limits import StrictJSONRoute
from api.routes.activity import Time
from projections.usage import cost_over_time, usage_by

router = APIRouter(prefix="/api/usage", tags=["usage"], route_class=StrictJSONRoute)

GroupBy = Literal["session", "workspace", "agent", "model", "day"]
Workspace = Annotated[str | None, Query(alias="workspaceId", pattern=r"^[a-z0-9][a-z0-9-]{0,62}$")]


@router.get("")
def usage(
    store: StoreDep,
    _: Consistent,
    group_by: Annotated[GroupBy, Query(alias="groupBy")] = "session",
    since: Time | None = None,
    until: Time | None = None,
    workspace: Workspace = None,
) -> dict[str, Any]:
    """Model requests, tokens and cost summed per session, workspace, agent, model or
    UTC day, for requests made at or after `since` and before `until`; largest cost
    first. Cost is what each runtime reported (none: 0)."""
    return {"items": usage_by(store, group_by, since=since, until=until, workspace=workspace)}


@router.get("/daily")
def usage_daily(
    store: StoreDep, _: Consistent, since: Time | None = None, until: Time | None = None
) -> dict[str, Any]:
    """Cost and tokens per workspace per UTC day, oldest day first (the page's chart)."""
    return {"items": cost_over_time(store, since=since, until=until)}
