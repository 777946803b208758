"""Schedule routes: cron in TACHOGRAPH_TIMEZONE, pause/resume, system rows only pausable."""

from __future__ import annotations

from typing import Annotated, Any
from uuid import UUID

from fastapi import APIRouter, Query, Response

from api.deps import ActorDep, CommitDep, Consistent, StoreDep, TasksDep
from api.errors import ApiError
from api.input_limits import StrictJSONRoute
from api.schemas import ScheduleCreate, ScheduleUpdate, Slug
from domain.errors import NotFound
from projections.schedules import get_schedule, list_schedules
from projections.store import ReadStore

router = APIRouter(prefix="/api/schedules", tags=["schedules"], route_class=StrictJSONRoute)

_FIELDS = {
    "name": "name",
    "cron": "cron",
    "prompt": "prompt",
    "model": "model",
    "maxAttempts": "max_attempts",
}
_NOT_NULL = ("name", "cron", "prompt", "maxAttempts", "paused")


def read_schedule(store: ReadStore, schedule_id: UUID) -> dict[str, Any]:
    row = get_schedule(store, str(schedule_id))
    if row is None:
        raise NotFound(f"Schedule {schedule_id} does not exist.")
    return row


@router.post("", status_code=201)
def create_schedule(
    body: ScheduleCreate, runtime: TasksDep, store: StoreDep, actor: ActorDep, commit: CommitDep
) -> dict[str, Any]:
    """A user schedule; the cron is validated in the server timezone."""
    recorded = runtime.schedules.create(
        body.workspaceId, body.name, body.cron, body.prompt, body.model, body.maxAttempts, actor
    )
    commit(recorded.position)
    return read_schedule(store, recorded.aggregate_id)


@router.get("")
def schedules(
    store: StoreDep,
    _: Consistent,
    workspace_id: Annotated[Slug | None, Query(alias="workspaceId")] = None,
    limit: Annotated[int, Query(ge=1, le=200)] = 200,
) -> dict[str, Any]:
    """Schedules, newest first."""
    return {"items": list_schedules(store, workspace=workspace_id, limit=limit)}


@router.get("/{schedule_id}")
def schedule(schedule_id: UUID, store: StoreDep, _: Consistent) -> dict[str, Any]:
    """One schedule."""
    return read_schedule(store, schedule_id)


@router.patch("/{schedule_id}")
def update_schedule(
    schedule_id: UUID,
    body: ScheduleUpdate,
    runtime: TasksDep,
    store: StoreDep,
    actor: ActorDep,
    commit: CommitDep,
) -> dict[str, Any]:
    """Change fields, pause or resume; system (self-update) rows accept only `paused`."""
    present = body.model_fields_set
    for name in _NOT_NULL:
        if name in present and getattr(body, name) is None:
            raise ApiError(422, "validation_error", f"{name}: must not be null.")
    changes = {_FIELDS[k]: getattr(body, k) for k in _FIELDS if k in present}
    recorded = runtime.schedules.update(schedule_id, changes, body.paused, actor)
    commit(recorded.position)
    return read_schedule(store, schedule_id)


@router.delete("/{schedule_id}", status_code=204)
def delete_schedule(
    schedule_id: UUID, runtime: TasksDep, actor: ActorDep, commit: CommitDep, response: Response
) -> Response:
    """Delete a user schedule; system schedules answer 409 (pause them instead)."""
    recorded = runtime.schedules.delete(schedule_id, actor)
    commit(recorded.position)
    response.status_code = 204
    return response
