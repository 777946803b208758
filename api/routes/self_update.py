"""Self-update reconcile: one system schedule per eligible workspace."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from api.deps import AutonomyDep, CommitDep, StoreDep
from api.input_limits import StrictJSONRoute
from projections.self_update import system_schedules

router = APIRouter(prefix="/api/autonomy", tags=["autonomy"], route_class=StrictJSONRoute)


@router.post("/reconcile")
def reconcile(autonomy: AutonomyDep, store: StoreDep, commit: CommitDep) -> dict[str, Any]:
    """Create, refresh, pause or resume system self-update schedules (recorded as `system`)."""
    result = autonomy.reconcile()
    commit(result.position)
    return {
        "created": result.created,
        "refreshed": result.refreshed,
        "paused": result.paused,
        "resumed": result.resumed,
        "items": system_schedules(store),
    }
