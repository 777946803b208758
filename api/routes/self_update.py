"""Self-update reconcile: one system schedule per eligible workspace."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Response

from api.deps import ServicesDep, committed
from api.input_limits import StrictJSONRoute
from api.routes.autonomy_settings import autonomy_of
from projections.self_update import system_schedules

router = APIRouter(prefix="/api/autonomy", tags=["autonomy"], route_class=StrictJSONRoute)


@router.post("/reconcile")
def reconcile(services: ServicesDep, response: Response) -> dict[str, Any]:
    """Create, refresh, pause or resume system self-update schedules (recorded as `system`)."""
    result = autonomy_of(services).reconcile()
    committed(services, response, result.position)
    return {
        "created": result.created,
        "refreshed": result.refreshed,
        "paused": result.paused,
        "resumed": result.resumed,
        "items": system_schedules(services.store),
    }
