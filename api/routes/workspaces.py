"""Workspace routes."""

from __future__ import annotations

from typing import Annotated, Any
from uuid import UUID

from fastapi import APIRouter, Query, Response

from api.deps import ActorDep, AppDep, CommitDep, Consistent, IngestDep, SettingsDep, StoreDep
from api.input_limits import StrictJSONRoute
from api.schemas import Slug, WorkspaceCreate, WorkspaceUpdate
from domain.errors import NotFound
from infra.workspace_paths import contained_path
from projections.sessions import session_ids_of_workspace
from projections.store import ReadStore
from projections.workspaces import get_workspace, list_workspaces

router = APIRouter(prefix="/api/workspaces", tags=["workspaces"], route_class=StrictJSONRoute)


def _read(store: ReadStore, slug: str) -> dict[str, Any]:
    row = get_workspace(store, slug)
    if row is None:
        raise NotFound(f"Workspace {slug!r} does not exist.")
    return row


@router.post("", status_code=201)
def register_workspace(
    body: WorkspaceCreate,
    app: AppDep,
    store: StoreDep,
    settings: SettingsDep,
    actor: ActorDep,
    commit: CommitDep,
    response: Response,
) -> dict[str, Any]:
    """Register an existing directory below the workspace root (a repeat returns the original)."""
    path = contained_path(settings.workspace_root, body.path)
    recorded, created = app.register_workspace(body.id, path, body.selfUpdate, actor)
    if not created:
        response.status_code = 200
    commit(recorded.position)
    return _read(store, body.id)


@router.get("")
def workspaces(
    store: StoreDep,
    _: Consistent,
    limit: Annotated[int, Query(ge=1, le=200)] = 200,
) -> dict[str, Any]:
    """List workspaces, newest first."""
    return {"items": list_workspaces(store, limit)}


@router.get("/{slug}")
def workspace(slug: Slug, store: StoreDep, _: Consistent) -> dict[str, Any]:
    """One workspace."""
    return _read(store, slug)


@router.patch("/{slug}")
def update_workspace(
    slug: Slug,
    body: WorkspaceUpdate,
    app: AppDep,
    store: StoreDep,
    actor: ActorDep,
    commit: CommitDep,
) -> dict[str, Any]:
    """Turn self-update cycles, or learned content in self-update prompts, on or off."""
    # Both options change in one save: a PATCH naming both is applied whole or not at all.
    workspace = app.get_workspace(slug)
    if body.selfUpdate is not None:
        workspace.set_self_update(body.selfUpdate, actor)
    if body.learnedInSelfUpdate is not None:
        workspace.set_learned_in_self_update(body.learnedInSelfUpdate, actor)
    commit(app.record(workspace))
    return _read(store, slug)


@router.delete("/{slug}/sessions")
def delete_workspace_sessions(
    slug: Slug,
    app: AppDep,
    store: StoreDep,
    ingest: IngestDep,
    actor: ActorDep,
    commit: CommitDep,
) -> dict[str, Any]:
    """Permanently delete every active and archived session of the workspace."""
    app.get_workspace(slug)
    last: int | None = None
    deleted: list[str] = []
    for session_id in session_ids_of_workspace(store, slug):
        try:
            last = ingest.close_session(UUID(session_id), actor)
        except NotFound:
            continue  # deleted concurrently: the outcome the caller asked for
        deleted.append(session_id)
    commit(last)
    return {"deleted": deleted}
