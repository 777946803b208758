"""Auditor routes: one aggregate's stream, time travel, the whole ordered log."""

from __future__ import annotations

from typing import Annotated, Any
from uuid import UUID

from eventsourcing.application import AggregateNotFoundError
from eventsourcing.domain import Aggregate
from fastapi import APIRouter, Header, Query
from fastapi.encoders import jsonable_encoder
from fastapi.responses import Response

from api.deps import AppDep
from api.input_limits import MAX_POSITION, StrictJSONRoute
from domain.base import TachographAggregate
from domain.errors import NotFound
from domain.strict_json import dumps_readable
from infra.log_reader import event_record, read_events, read_stream

router = APIRouter(prefix="/api", tags=["auditors"], route_class=StrictJSONRoute)


@router.get("/streams/{aggregate_id}")
def stream(aggregate_id: UUID, app: AppDep) -> dict[str, Any]:
    """Every event of one aggregate, oldest first, with log positions."""
    notifications = read_stream(app, aggregate_id)
    if not notifications:
        raise NotFound(f"No aggregate {aggregate_id} in the log.")
    events = [event_record(app, n) for n in notifications]
    for e in events:
        del e["aggregateId"]
    body: dict[str, Any] = jsonable_encoder(
        {
            "aggregateId": str(aggregate_id),
            "type": events[0]["type"].split(".")[0],
            "events": events,
        }
    )
    return body


@router.get("/streams/{aggregate_id}/state")
def state_at(
    aggregate_id: UUID,
    app: AppDep,
    version: Annotated[int | None, Query(ge=1, le=MAX_POSITION)] = None,
) -> dict[str, Any]:
    """The aggregate's state at a version (time travel); the latest when version is omitted."""
    try:
        aggregate: Aggregate = app.repository.get(aggregate_id, version=version)
    except AggregateNotFoundError:
        raise NotFound(f"No aggregate {aggregate_id} in the log.") from None
    if version is not None and aggregate.version < version:
        raise NotFound(
            f"Aggregate {aggregate_id} has {aggregate.version} versions; {version} does not exist."
        )
    state = aggregate.state_dict() if isinstance(aggregate, TachographAggregate) else {}
    body: dict[str, Any] = jsonable_encoder(
        {
            "aggregateId": str(aggregate_id),
            "type": type(aggregate).__name__,
            "version": aggregate.version,
            "at": aggregate.modified_on,
            "state": state,
        }
    )
    return body


@router.get("/events", response_model=None)
def events(
    app: AppDep,
    after: Annotated[int, Query(ge=0, le=MAX_POSITION)] = 0,
    limit: Annotated[int, Query(ge=1, le=500)] = 500,
    type: Annotated[str | None, Query(max_length=200)] = None,
    accept: Annotated[str | None, Header()] = None,
) -> Response | dict[str, Any]:
    """The ordered log after a position; NDJSON with Accept: application/x-ndjson."""
    types = [t for t in (type or "").split(",") if t]
    page = read_events(app, after, limit, types)
    records = jsonable_encoder([event_record(app, n) for n in page])
    next_position = page[-1].id if len(page) == limit else None
    if accept and "application/x-ndjson" in accept:
        body = "".join(dumps_readable(r, separators=(",", ":")) + "\n" for r in records)
        headers = {"x-tachograph-next": str(next_position) if next_position else ""}
        return Response(body, media_type="application/x-ndjson", headers=headers)
    page_body = dumps_readable({"events": records, "next": next_position}, separators=(",", ":"))
    return Response(page_body, media_type="application/json")
