"""Task routes: the board (rows without activity), detail with activity, operator commands."""

from __future__ import annotations

from typing import Annotated, Any, Literal
from uuid import UUID

from fastapi import APIRouter, Query, Response

from api.deps import ActorDep, Consistent, ServicesDep, committed
from api.input_limits import StrictJSONRoute
from api.schemas import Slug, TaskCreate, TaskResolve
from bootstrap import Services
from domain.errors import NotFound
from projections.self_update_cycles import has_workflow
from projections.tasks import get_task, list_tasks
from scheduler.tasks import TaskRuntime

router = APIRouter(prefix="/api/tasks", tags=["tasks"], route_class=StrictJSONRoute)

TaskStatus = Literal[
    "queued", "running", "cancelling", "completed", "failed", "cancelled", "dead-letter"
]


def tasks_of(services: Services) -> TaskRuntime:
    """The process's task runtime (built by the composition root)."""
    assert services.tasks is not None, "build_services wires the task runtime"
    return services.tasks


def read_task(services: Services, task_id: UUID) -> dict[str, Any]:
    row = get_task(services.store, str(task_id))
    if row is None:
        raise NotFound(f"Task {task_id} does not exist.")
    # The page asks for /workflow only when there is one (no 404 for a plain task).
    row["hasWorkflow"] = has_workflow(services.store, str(task_id))
    return row


@router.post("", status_code=201)
def create_task(
    body: TaskCreate, services: ServicesDep, actor: ActorDep, response: Response
) -> dict[str, Any]:
    """Queue a task (`source: "user"`) in a workspace."""
    recorded = tasks_of(services).service.create(
        body.workspaceId, body.prompt, body.model, body.maxAttempts, actor
    )
    committed(services, response, recorded.position)
    return read_task(services, recorded.aggregate_id)


@router.get("")
def tasks(
    services: ServicesDep,
    _: Consistent,
    status: TaskStatus | None = None,
    workspace_id: Annotated[Slug | None, Query(alias="workspaceId")] = None,
    source: Annotated[str | None, Query(max_length=64)] = None,
    limit: Annotated[int, Query(ge=1, le=200)] = 200,
) -> dict[str, Any]:
    """Task rows, newest first; never carries activity (the board polls this)."""
    rows = list_tasks(
        services.store, status=status, workspace=workspace_id, source=source, limit=limit
    )
    return {"items": rows}


@router.get("/{task_id}")
def task(task_id: UUID, services: ServicesDep, _: Consistent) -> dict[str, Any]:
    """The row with the full prompt and the latest 256 activity records, oldest first."""
    return read_task(services, task_id)


@router.post("/{task_id}/cancel")
def cancel_task(
    task_id: UUID, services: ServicesDep, actor: ActorDep, response: Response
) -> dict[str, Any]:
    """Queued → cancelled; running → cancelling, cancelled once the process is reaped."""
    recorded = tasks_of(services).service.cancel(task_id, actor)
    committed(services, response, recorded.position)
    return read_task(services, task_id)


@router.post("/{task_id}/resolve")
def resolve_task(
    task_id: UUID, body: TaskResolve, services: ServicesDep, actor: ActorDep, response: Response
) -> dict[str, Any]:
    """Failed, cancelled or dead-letter → completed with the operator's summary."""
    recorded = tasks_of(services).service.resolve(task_id, body.summary, actor)
    committed(services, response, recorded.position)
    return read_task(services, task_id)


@router.delete("/{task_id}", status_code=204)
def delete_task(
    task_id: UUID, services: ServicesDep, actor: ActorDep, response: Response
) -> Response:
    """Remove a terminal task from the read models (its events stay in the log)."""
    recorded = tasks_of(services).service.delete(task_id, actor)
    committed(services, response, recorded.position)
    response.status_code = 204
    return response
