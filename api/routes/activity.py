"""Auditor search over every recorded tool call (GET /api/activity)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal
from uuid import UUID

from fastapi import APIRouter, Query
from pydantic import AfterValidator

from api.deps import Consistent, StoreDep
from api.input_limits import MAX_POSITION, StrictJSONRoute
from projections.activity import OUTCOME, ActivityQuery, search_activity
from projections.base import iso
from projections.session_titles import with_session_titles

router = APIRouter(prefix="/api", tags=["activity"], route_class=StrictJSONRoute)

Text = Annotated[str, Query(min_length=1, max_length=256)]
ISO_WITH_ZONE = r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(:\d{2}(\.\d{1,6})?)?(Z|[+-]\d{2}:\d{2})$"


def _recorded_time(value: str) -> str:
    """An ISO-8601 time with a zone, as the read model stores times (fixed-width UTC)."""
    return iso(datetime.fromisoformat(value.replace("Z", "+00:00")))


# A string, not a datetime: pydantic would also take a number as seconds since 1970.
Time = Annotated[
    str,
    Query(pattern=ISO_WITH_ZONE, description="ISO-8601 with a zone, e.g. 2026-12-01T00:00:00Z"),
    AfterValidator(_recorded_time),
]


@router.get("/activity")
def activity(
    store: StoreDep,
    _: Consistent,
    tool: Text | None = None,
    contains: Text | None = None,
    workspaceId: Annotated[str | None, Query(pattern=r"^[a-z0-9][a-z0-9-]{0,62}$")] = None,
    sessionId: UUID | None = None,
    outcome: OUTCOME | None = None,
    ruleId: Annotated[str | None, Query(pattern=r"^[A-Za-z0-9._-]{1,64}$")] = None,
    policyMode: Literal["enforce", "shadow"] | None = None,
    since: Time | None = None,
    until: Time | None = None,
    before: Annotated[int | None, Query(ge=1, le=MAX_POSITION)] = None,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
) -> dict[str, Any]:
    """Tool calls across sessions, newest first by log position: by tool, text in the
    input summary (any case), workspace, session, decision, the policy rule that decided
    the call or would have (`ruleId`, `policyMode`) and time (`since` ≤ at < `until`).
    Pass `next` as `before` for the following page."""
    query = ActivityQuery(
        tool=tool,
        contains=contains,
        workspace_id=workspaceId,
        session_id=str(sessionId) if sessionId else None,
        outcome=outcome,
        rule_id=ruleId,
        policy_mode=policyMode,
        since=since,
        until=until,
        before=before,
        limit=limit,
    )
    items, next_before = search_activity(store, query)
    items = with_session_titles(store, items)
    return {"items": items, "next": next_before, "sortedBy": "recordedAt"}
