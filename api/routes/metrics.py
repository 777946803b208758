"""Prometheus metrics."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response

from api.input_limits import StrictJSONRoute

router = APIRouter(tags=["operations"], route_class=StrictJSONRoute)


@router.get("/metrics", response_class=Response)
def metrics(request: Request) -> Response:
    """Prometheus text format: requests, appends, group commits, projections, hooks, tasks, jobs."""
    rendered = request.app.state.metrics
    return Response(rendered.render(), media_type=rendered.content_type)
