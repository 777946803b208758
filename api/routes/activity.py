"""Auditor search over every recorded tool call (GET /api/activity)."""

from __future__ import annotations

from typing import Annotated, Any, Literal
from uuid import UUID

from fastapi import APIRouter, Query
from pydantic import AwareDatetime

from api.deps import Consistent, ServicesDep
from api.input_limits import MAX_POSITION
from projections.activity import ActivityQuery, search_activity
from projections.base import iso

router = APIRouter(prefix="/api", tags=["activity"])

Text = Annotated[str, Query(min_length=1, max_length=256)]


@router.get("/activity")
def activity(
    services: ServicesDep,
    _: Consistent,
    tool: Text | None = None,
    contains: Text | None = None,
    workspaceId: Annotated[str | None, Query(pattern=r"^[a-z0-9][a-z0-9-]{0,62}$")] = None,
    sessionId: UUID | None = None,
    outcome: Literal["pass", "deny", "modify"] | None = None,
    since: AwareDatetime | None = None,
    until: AwareDatetime | None = None,
    before: Annotated[int | None, Query(ge=1, le=MAX_POSITION)] = None,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
) -> dict[str, Any]:
    """Tool calls across sessions, newest first by log position: by tool, text in the
    input summary (any case), workspace, session, decision and time (`since` ≤ at <
    `until`). Pass `next` as `before` for the following page."""
    query = ActivityQuery(
        tool=tool,
        contains=contains,
        workspace_id=workspaceId,
        session_id=str(sessionId) if sessionId else None,
        outcome=outcome,
        since=_at(since),
        until=_at(until),
        before=before,
        limit=limit,
    )
    items, next_before = search_activity(services.store, query)
    return {"items": items, "next": next_before, "sortedBy": "recordedAt"}


def _at(value: AwareDatetime | None) -> str | None:
    """As the read model stores times (fixed-width UTC, so strings compare as times)."""
    return None if value is None else iso(value)
