"""The OTLP receiver process's own status routes (api/app.py:create_receiver_app).

Public like the main port's /metrics: they name no session, token or workspace.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest

from api.deps import AppDep
from api.input_limits import StrictJSONRoute

router = APIRouter(tags=["operations"], route_class=StrictJSONRoute)


@router.get("/health", response_model=None)
def receiver_health(app: AppDep) -> JSONResponse:
    """Up, and whether the log is reachable: 503 with the same body when it is not."""
    body: dict[str, Any] = {"status": "ok", "role": "otlp-receiver", "database": "ok"}
    try:
        app.recorder.max_notification_id()
    except Exception:  # noqa: BLE001 - any failure to reach the store means unavailable
        body |= {"status": "unavailable", "database": "unreachable"}  # as /api/health says
        return JSONResponse(body, status_code=503)
    return JSONResponse(body)


@router.get("/metrics", response_class=Response)
def receiver_metrics() -> Response:
    """This process's counters in Prometheus text: exports by signal and outcome,
    requests, appends and group commits (the main port's /metrics has the rest)."""
    return Response(generate_latest(REGISTRY), media_type=CONTENT_TYPE_LATEST)
