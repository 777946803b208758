"""Task routes: the board (rows without activity), detail with activity, operator commands."""

from __future__ import annotations

from typing import Annotated, Any, Literal
from uuid import UUID

from fastapi import APIRouter, Query, Response

from api.deps import ActorDep, CommitDep, Consistent, StoreDep, TasksDep
from api.input_limits import StrictJSONRoute
from api.schemas import Slug, TaskCreate, TaskResolve
from domain.errors import NotFound
from projections.self_update_cycles import has_workflow
from projections.store import ReadStore
from projections.tasks import get_task, list_tasks

router = APIRouter(prefix="/api/tasks", tags=["tasks"], route_class=StrictJSONRoute)

TaskStatus = Literal[
    "queued", "running", "cancelling", "completed", "failed", "cancelled", "dead-letter"
]


def read_task(store: ReadStore, task_id: UUID) -> dict[str, Any]:
    row = get_task(store, str(task_id))
    if row is None:
        raise NotFound(f"Task {task_id} does not exist.")
    # The page asks for /workflow only when there is one (no 404 for a plain task).
    row["hasWorkflow"] = has_workflow(store, str(task_id))
    return row


@router.post("", status_code=201)
def create_task(
    body: TaskCreate, runtime: TasksDep, store: StoreDep, actor: ActorDep, commit: CommitDep
) -> dict[str, Any]:
    """Queue a task (`source: "user"`) in a workspace."""
    recorded = runtime.service.create(
        body.workspaceId, body.prompt, body.model, body.maxAttempts, actor
    )
    commit(recorded.position)
    return read_task(store, recorded.aggregate_id)


@router.get("")
def tasks(
    store: StoreDep,
    _: Consistent,
    status: TaskStatus | None = None,
    workspace_id: Annotated[Slug | None, Query(alias="workspaceId")] = None,
    source: Annotated[str | None, Query(max_length=64)] = None,
    limit: Annotated[int, Query(ge=1, le=200)] = 200,
) -> dict[str, Any]:
    """Task rows, newest first; never carries activity (the board polls this)."""
    rows = list_tasks(store, status=status, workspace=workspace_id, source=source, limit=limit)
    return {"items": rows}


@router.get("/{task_id}")
def task(task_id: UUID, store: StoreDep, _: Consistent) -> dict[str, Any]:
    """The row with the full prompt and the latest 256 activity records, oldest first."""
    return read_task(store, task_id)


@router.post("/{task_id}/cancel")
def cancel_task(
    task_id: UUID, runtime: TasksDep, store: StoreDep, actor: ActorDep, commit: CommitDep
) -> dict[str, Any]:
    """Queued → cancelled; running → cancelling, cancelled once the process is reaped."""
    recorded = runtime.service.cancel(task_id, actor)
    commit(recorded.position)
    return read_task(store, task_id)


@router.post("/{task_id}/resolve")
def resolve_task(
    task_id: UUID,
    body: TaskResolve,
    runtime: TasksDep,
    store: StoreDep,
    actor: ActorDep,
    commit: CommitDep,
) -> dict[str, Any]:
    """Failed, cancelled or dead-letter → completed with the operator's summary."""
    recorded = runtime.service.resolve(task_id, body.summary, actor)
    commit(recorded.position)
    return read_task(store, task_id)


@router.delete("/{task_id}", status_code=204)
def delete_task(
    task_id: UUID, runtime: TasksDep, actor: ActorDep, commit: CommitDep, response: Response
) -> Response:
    """Remove a terminal task from the read models (its events stay in the log)."""
    recorded = runtime.service.delete(task_id, actor)
    commit(recorded.position)
    response.status_code = 204
    return response
