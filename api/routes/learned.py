"""Learned revisions and targets: the append-only revision list, reverts, user edits."""

from __future__ import annotations

import logging
from typing import Annotated, Any
from uuid import UUID

from fastapi import APIRouter, Query, Response

from api.autonomy_schemas import AgentId, Promotion, TargetEdit, TargetKey, TargetKind
from api.deps import ActorDep, Consistent, ServicesDep, committed
from api.input_limits import StrictJSONRoute
from api.routes.autonomy_settings import autonomy_of
from api.schemas import Slug
from bootstrap import Services
from domain.errors import NotFound
from projections.deliveries import delivery_totals, revision_deliveries
from projections.learned import (
    get_revision,
    get_target,
    list_revisions,
    list_targets,
    revision_target_id,
    target_by_id,
)
from projections.session_titles import with_session_titles

log = logging.getLogger(__name__)
router = APIRouter(prefix="/api/autonomy", tags=["autonomy"], route_class=StrictJSONRoute)
MAX_POSITION = 2**62


def read_revision(services: Services, revision_id: UUID) -> dict[str, Any]:
    """One revision with its deliveries' totals; a compensation also says which
    deliveries it supersedes (those of the revision it reverted)."""
    row = get_revision(services.store, str(revision_id))
    if row is None:
        raise NotFound(f"Revision {revision_id} does not exist.")
    row["deliveries"] = delivery_totals(services.store, row["id"])
    target = target_by_id(services.store, revision_target_id(services.store, row["id"]) or "")
    promotion = target["promotion"] if target else None
    # The promotion in force, when it is of this revision.
    row["promotion"] = promotion if promotion and promotion["revisionId"] == row["id"] else None
    reverted = row["revertsRevisionId"]
    row["supersedes"] = (
        None
        if reverted is None
        else {"revisionId": reverted, "deliveries": delivery_totals(services.store, reverted)}
    )
    return row


def _delivered_again(services: Services) -> None:
    """This process's next deliveries reflect a change this request just waited for.

    The runner refreshes the snapshot when it applies the change; when another
    process's runner applied it first, this one only saw it go by, so read it here.
    """
    if services.learned is None:
        return
    try:
        services.learned.refresh()
    except Exception:  # noqa: BLE001 - the change is recorded; the follower catches up
        log.exception("learned content could not be refreshed")


def read_target(
    services: Services, kind: str, agent_id: str, key: str, workspace_id: str | None = None
) -> dict[str, Any]:
    row = get_target(services.store, kind, agent_id, key, workspace_id)
    if row is None:
        where = f" in workspace {workspace_id!r}" if workspace_id else ""
        raise NotFound(f"Target {kind}/{agent_id}/{key}{where} does not exist.")
    return row


# A target learned from a workspace's evidence is that workspace's: name it to address it.
WorkspaceQuery = Annotated[Slug | None, Query(alias="workspaceId")]


def _target_of(services: Services, revision_id: UUID) -> UUID:
    """The revision's target; a revision is immutable, so the read model may answer this."""
    found = revision_target_id(services.store, str(revision_id))
    if found is None:  # maybe just recorded elsewhere: look again at the log head
        services.runner.wait_for(
            services.app.recorder.max_notification_id() or 0, services.settings.read_wait_s
        )
        found = revision_target_id(services.store, str(revision_id))
    if found is None:
        raise NotFound(f"Revision {revision_id} does not exist.")
    return UUID(found)


@router.get("/revisions")
def revisions(
    services: ServicesDep,
    _: Consistent,
    target_kind: Annotated[TargetKind | None, Query(alias="targetKind")] = None,
    agent_id: Annotated[AgentId | None, Query(alias="agentId")] = None,
    limit: Annotated[int, Query(ge=1, le=200)] = 200,
) -> dict[str, Any]:
    """Every learned revision and compensation, newest first (append-only)."""
    rows = list_revisions(services.store, target_kind=target_kind, agent_id=agent_id, limit=limit)
    return {"items": rows}


@router.get("/revisions/{revision_id}")
def revision(revision_id: UUID, services: ServicesDep, _: Consistent) -> dict[str, Any]:
    """One revision."""
    return read_revision(services, revision_id)


@router.get("/revisions/{revision_id}/deliveries")
def deliveries(
    revision_id: UUID,
    services: ServicesDep,
    _: Consistent,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
    before: Annotated[int | None, Query(ge=1, le=MAX_POSITION)] = None,
) -> dict[str, Any]:
    """The sessions and task attempts that received this revision, newest first (by
    log position; `before` is the position of the last item of the previous page), with
    their total `count` and `latestAt`."""
    read_revision(services, revision_id)
    page = revision_deliveries(services.store, str(revision_id), limit=limit, before=before)
    with_session_titles(services.store, page["items"])
    return page


@router.post("/revisions/{revision_id}/revert")
def revert_revision(
    revision_id: UUID, services: ServicesDep, actor: ActorDep, response: Response
) -> dict[str, Any]:
    """Append the compensating revision that restores the content before this one.

    409 `not_latest`, `already_reverted`, `not_revertible`, `user_owned`, `target_changed`.
    """
    target_id = _target_of(services, revision_id)
    recorded, compensation = autonomy_of(services).autonomy.revert(target_id, revision_id, actor)
    committed(services, response, recorded.position)
    _delivered_again(services)
    return read_revision(services, compensation)


@router.post("/revisions/{revision_id}/promote")
def promote_revision(
    revision_id: UUID,
    body: Promotion,
    services: ServicesDep,
    actor: ActorDep,
    response: Response,
) -> dict[str, Any]:
    """Deliver this revision's content beyond the workspace its evidence came from:
    to every workspace (`global`) or to the `workspaceIds` named (none: withdraw).

    Covers exactly this content: once the target changes, other workspaces get nothing
    of it until a later revision is promoted. 409 `not_latest`, `target_changed`,
    `not_scoped` (a target of every workspace already).
    """
    target_id = _target_of(services, revision_id)
    everywhere = body.scope == "global"
    recorded = autonomy_of(services).autonomy.promote(
        target_id, revision_id, everywhere, [] if everywhere else body.workspaceIds, actor
    )
    committed(services, response, recorded.position)
    _delivered_again(services)
    return read_revision(services, revision_id)


@router.get("/targets")
def targets(
    services: ServicesDep,
    _: Consistent,
    kind: TargetKind | None = None,
    agent_id: Annotated[AgentId | None, Query(alias="agentId")] = None,
    workspace_id: WorkspaceQuery = None,
    limit: Annotated[int, Query(ge=1, le=200)] = 200,
) -> dict[str, Any]:
    """Targets with their effective content, most recently changed first."""
    rows = list_targets(
        services.store, kind=kind, agent_id=agent_id, workspace_id=workspace_id, limit=limit
    )
    return {"items": rows}


@router.get("/targets/{kind}/{agent_id}/{key}")
def target(
    kind: TargetKind,
    agent_id: AgentId,
    key: TargetKey,
    services: ServicesDep,
    _: Consistent,
    workspace_id: WorkspaceQuery = None,
) -> dict[str, Any]:
    """Effective content, `evolutionManaged`, and the history of changes (oldest first);
    of the target for every workspace, or of `workspaceId`'s."""
    return read_target(services, kind, agent_id, key, workspace_id)


@router.put("/targets/{kind}/{agent_id}/{key}")
def edit_target(
    kind: TargetKind,
    agent_id: AgentId,
    key: TargetKey,
    body: TargetEdit,
    services: ServicesDep,
    actor: ActorDep,
    response: Response,
    workspace_id: WorkspaceQuery = None,
) -> dict[str, Any]:
    """A user edit: sets the content; the target becomes user-owned (evolution keeps off)."""
    if workspace_id is not None:
        services.app.get_workspace(workspace_id)
    recorded = autonomy_of(services).autonomy.edit_target(
        kind, agent_id, key, body.content, actor, workspace_id
    )
    committed(services, response, recorded.position)
    _delivered_again(services)
    return read_target(services, kind, agent_id, key, workspace_id)


@router.post("/targets/{kind}/{agent_id}/{key}/hand-back")
def hand_back_target(
    kind: TargetKind,
    agent_id: AgentId,
    key: TargetKey,
    services: ServicesDep,
    actor: ActorDep,
    response: Response,
    workspace_id: WorkspaceQuery = None,
) -> dict[str, Any]:
    """Return a user-owned target to evolution; its content stays as the person left it."""
    recorded = autonomy_of(services).autonomy.hand_back_target(
        kind, agent_id, key, actor, workspace_id
    )
    committed(services, response, recorded.position)
    _delivered_again(services)
    return read_target(services, kind, agent_id, key, workspace_id)
