"""Workspace routes."""

from __future__ import annotations

from typing import Annotated, Any
from uuid import UUID

from fastapi import APIRouter, Query, Response

from api.deps import ActorDep, Consistent, ServicesDep, committed
from api.input_limits import StrictJSONRoute
from api.schemas import Slug, WorkspaceCreate, WorkspaceUpdate
from domain.errors import NotFound
from infra.workspace_paths import contained_path
from projections.sessions import session_ids_of_workspace
from projections.workspaces import get_workspace, list_workspaces

router = APIRouter(prefix="/api/workspaces", tags=["workspaces"], route_class=StrictJSONRoute)


def _read(services: ServicesDep, slug: str) -> dict[str, Any]:
    row = get_workspace(services.store, slug)
    if row is None:
        raise NotFound(f"Workspace {slug!r} does not exist.")
    return row


@router.post("", status_code=201)
def register_workspace(
    body: WorkspaceCreate, services: ServicesDep, actor: ActorDep, response: Response
) -> dict[str, Any]:
    """Register an existing directory below the workspace root (a repeat returns the original)."""
    path = contained_path(services.settings.workspace_root, body.path)
    recorded, created = services.app.register_workspace(body.id, path, body.selfUpdate, actor)
    if not created:
        response.status_code = 200
    committed(services, response, recorded.position)
    return _read(services, body.id)


@router.get("")
def workspaces(
    services: ServicesDep,
    _: Consistent,
    limit: Annotated[int, Query(ge=1, le=200)] = 200,
) -> dict[str, Any]:
    """List workspaces, newest first."""
    return {"items": list_workspaces(services.store, limit)}


@router.get("/{slug}")
def workspace(slug: Slug, services: ServicesDep, _: Consistent) -> dict[str, Any]:
    """One workspace."""
    return _read(services, slug)


@router.patch("/{slug}")
def update_workspace(
    slug: Slug, body: WorkspaceUpdate, services: ServicesDep, actor: ActorDep, response: Response
) -> dict[str, Any]:
    """Turn self-update cycles, or learned content in self-update prompts, on or off."""
    # Both options change in one save: a PATCH naming both is applied whole or not at all.
    workspace = services.app.get_workspace(slug)
    if body.selfUpdate is not None:
        workspace.set_self_update(body.selfUpdate, actor)
    if body.learnedInSelfUpdate is not None:
        workspace.set_learned_in_self_update(body.learnedInSelfUpdate, actor)
    committed(services, response, services.app.record(workspace))
    return _read(services, slug)


@router.delete("/{slug}/sessions")
def delete_workspace_sessions(
    slug: Slug, services: ServicesDep, actor: ActorDep, response: Response
) -> dict[str, Any]:
    """Permanently delete every active and archived session of the workspace."""
    services.app.get_workspace(slug)
    last: int | None = None
    deleted: list[str] = []
    for session_id in session_ids_of_workspace(services.store, slug):
        try:
            last = services.delete_session(UUID(session_id), actor)
        except NotFound:
            continue  # deleted concurrently: the outcome the caller asked for
        deleted.append(session_id)
    committed(services, response, last)
    return {"deleted": deleted}
