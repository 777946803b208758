"""A self-update task's workflow: its phases with their evidence, an operator's review,
and discarding the ref it imported."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any
from uuid import UUID

from fastapi import APIRouter
from pydantic import Field, StrictBool

from api.deps import ActorDep, AppDep, CommitDep, Consistent, SettingsDep, StoreDep
from api.input_limits import StrictJSONRoute
from api.schemas import Strict
from domain.errors import NotFound
from domain.self_update_cycle import CycleRecorder
from infra.self_update_git.refs import discard_ref
from projections.self_update_cycles import task_workflow

router = APIRouter(prefix="/api/tasks", tags=["tasks"], route_class=StrictJSONRoute)


class Review(Strict):
    digest: Annotated[str, Field(min_length=1, max_length=80)]
    approve: StrictBool
    reason: Annotated[str, Field(max_length=2000)] | None = None


class Discard(Strict):
    reason: Annotated[str, Field(max_length=500)] | None = None


@router.get("/{task_id}/workflow")
def workflow(task_id: UUID, store: StoreDep, _: Consistent) -> dict[str, Any]:
    """prepare → implement → inspect → review → commit, in order, each with its evidence."""
    found = task_workflow(store, str(task_id))
    if found is None:
        raise NotFound(f"Task {task_id} has no self-update workflow.")
    return found


@router.post("/{task_id}/review")
def review(
    task_id: UUID,
    body: Review,
    app: AppDep,
    store: StoreDep,
    actor: ActorDep,
    commit: CommitDep,
) -> dict[str, Any]:
    """A person's verdict on the patch a cycle awaits review for; another digest rejects."""
    if task_workflow(store, str(task_id)) is None:
        raise NotFound(f"Task {task_id} has no self-update workflow.")
    position = CycleRecorder(app).decide(task_id, body.digest, body.approve, body.reason, actor)
    commit(position)
    result = task_workflow(store, str(task_id))
    assert result is not None
    return result


@router.post("/{task_id}/discard")
def discard(
    task_id: UUID,
    app: AppDep,
    store: StoreDep,
    settings: SettingsDep,
    actor: ActorDep,
    commit: CommitDep,
    body: Discard | None = None,
) -> dict[str, Any]:
    """Delete the ref an accepted cycle imported, and record that it was discarded."""
    found = task_workflow(store, str(task_id))
    if found is None:
        raise NotFound(f"Task {task_id} has no self-update workflow.")
    recorder = CycleRecorder(app)
    if found["ref"] is not None and found["discardedAt"] is None:
        workspace = app.get_workspace(found["workspaceId"])
        # The ref first: a repeat after a failed record finds it gone and records then.
        discard_ref(Path(settings.workspace_root, workspace.path).resolve(), found["ref"])
    position = recorder.discard(task_id, actor, body.reason if body else None)
    commit(position)
    result = task_workflow(store, str(task_id))
    assert result is not None
    return result
