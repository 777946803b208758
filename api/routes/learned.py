"""Learned revisions and targets: the append-only revision list, reverts, user edits."""

from __future__ import annotations

import logging
from collections.abc import Callable
from functools import partial
from typing import Annotated, Any
from uuid import UUID

from fastapi import APIRouter, Depends, Query

from api.autonomy_schemas import AgentId, Promotion, TargetEdit, TargetKey, TargetKind
from api.deps import (
    ActorDep,
    AppDep,
    AutonomyDep,
    Commit,
    CommitDep,
    Consistent,
    LearnedDep,
    RunnerDep,
    SettingsDep,
    StoreDep,
)
from api.input_limits import StrictJSONRoute
from api.schemas import Slug
from domain.application import Tachograph
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
from projections.runner import ProjectionRunner
from projections.session_titles import with_session_titles
from projections.store import ReadStore
from services.learned_context import LearnedContext

log = logging.getLogger(__name__)
router = APIRouter(prefix="/api/autonomy", tags=["autonomy"], route_class=StrictJSONRoute)
MAX_POSITION = 2**62


def read_revision(store: ReadStore, revision_id: UUID) -> dict[str, Any]:
    """One revision with its deliveries' totals; a compensation also says which
    deliveries it supersedes (those of the revision it reverted)."""
    row = get_revision(store, str(revision_id))
    if row is None:
        raise NotFound(f"Revision {revision_id} does not exist.")
    row["deliveries"] = delivery_totals(store, row["id"])
    target = target_by_id(store, revision_target_id(store, row["id"]) or "")
    promotion = target["promotion"] if target else None
    # The promotion in force, when it is of this revision.
    row["promotion"] = promotion if promotion and promotion["revisionId"] == row["id"] else None
    reverted = row["revertsRevisionId"]
    row["supersedes"] = (
        None
        if reverted is None
        else {"revisionId": reverted, "deliveries": delivery_totals(store, reverted)}
    )
    return row


def _delivered_again(commit: Commit, learned: LearnedContext, position: int | None) -> None:
    """Wait for the change in the read models; then this process's next deliveries
    reflect it.

    The runner refreshes the snapshot when it applies the change; when another
    process's runner applied it first, this one only saw it go by, so read it here.
    """
    commit(position)
    try:
        learned.refresh()
    except Exception:  # noqa: BLE001 - the change is recorded; the follower catches up
        log.exception("learned content could not be refreshed")


async def learned_change(commit: CommitDep, learned: LearnedDep) -> Callable[[int | None], None]:
    return partial(_delivered_again, commit, learned)


# What a route calls with the position of a learned change it recorded.
LearnedChange = Annotated[Callable[[int | None], None], Depends(learned_change)]


def read_target(
    store: ReadStore, kind: str, agent_id: str, key: str, workspace_id: str | None = None
) -> dict[str, Any]:
    row = get_target(store, kind, agent_id, key, workspace_id)
    if row is None:
        where = f" in workspace {workspace_id!r}" if workspace_id else ""
        raise NotFound(f"Target {kind}/{agent_id}/{key}{where} does not exist.")
    return row


# A target learned from a workspace's evidence is that workspace's: name it to address it.
WorkspaceQuery = Annotated[Slug | None, Query(alias="workspaceId")]


def _target_of(
    app: Tachograph, store: ReadStore, runner: ProjectionRunner, wait_s: float, revision_id: UUID
) -> UUID:
    """The revision's target; a revision is immutable, so the read model may answer this."""
    found = revision_target_id(store, str(revision_id))
    if found is None:  # maybe just recorded elsewhere: look again at the log head
        runner.wait_for(app.recorder.max_notification_id() or 0, wait_s)
        found = revision_target_id(store, str(revision_id))
    if found is None:
        raise NotFound(f"Revision {revision_id} does not exist.")
    return UUID(found)


async def revision_targets(
    app: AppDep, store: StoreDep, runner: RunnerDep, settings: SettingsDep
) -> Callable[[UUID], UUID]:
    return partial(_target_of, app, store, runner, settings.read_wait_s)


# What a route calls for the target of a revision it was named.
TargetOf = Annotated[Callable[[UUID], UUID], Depends(revision_targets)]


@router.get("/revisions")
def revisions(
    store: StoreDep,
    _: Consistent,
    target_kind: Annotated[TargetKind | None, Query(alias="targetKind")] = None,
    agent_id: Annotated[AgentId | None, Query(alias="agentId")] = None,
    limit: Annotated[int, Query(ge=1, le=200)] = 200,
) -> dict[str, Any]:
    """Every learned revision and compensation, newest first (append-only)."""
    rows = list_revisions(store, target_kind=target_kind, agent_id=agent_id, limit=limit)
    return {"items": rows}


@router.get("/revisions/{revision_id}")
def revision(revision_id: UUID, store: StoreDep, _: Consistent) -> dict[str, Any]:
    """One revision."""
    return read_revision(store, revision_id)


@router.get("/revisions/{revision_id}/deliveries")
def deliveries(
    revision_id: UUID,
    store: StoreDep,
    _: Consistent,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
    before: Annotated[int | None, Query(ge=1, le=MAX_POSITION)] = None,
) -> dict[str, Any]:
    """The sessions and task attempts that received this revision, newest first (by
    log position; `before` is the position of the last item of the previous page), with
    their total `count` and `latestAt`."""
    read_revision(store, revision_id)
    page = revision_deliveries(store, str(revision_id), limit=limit, before=before)
    with_session_titles(store, page["items"])
    return page


@router.post("/revisions/{revision_id}/revert")
def revert_revision(
    revision_id: UUID,
    target_of: TargetOf,
    autonomy: AutonomyDep,
    store: StoreDep,
    actor: ActorDep,
    changed: LearnedChange,
) -> dict[str, Any]:
    """Append the compensating revision that restores the content before this one.

    409 `not_latest`, `already_reverted`, `not_revertible`, `user_owned`, `target_changed`.
    """
    target_id = target_of(revision_id)
    recorded, compensation = autonomy.autonomy.revert(target_id, revision_id, actor)
    changed(recorded.position)
    return read_revision(store, compensation)


@router.post("/revisions/{revision_id}/promote")
def promote_revision(
    revision_id: UUID,
    body: Promotion,
    target_of: TargetOf,
    autonomy: AutonomyDep,
    store: StoreDep,
    actor: ActorDep,
    changed: LearnedChange,
) -> dict[str, Any]:
    """Deliver this revision's content beyond the workspace its evidence came from:
    to every workspace (`global`) or to the `workspaceIds` named (none: withdraw).

    Covers exactly this content: once the target changes, other workspaces get nothing
    of it until a later revision is promoted. 409 `not_latest`, `target_changed`,
    `not_scoped` (a target of every workspace already).
    """
    target_id = target_of(revision_id)
    everywhere = body.scope == "global"
    recorded = autonomy.autonomy.promote(
        target_id, revision_id, everywhere, [] if everywhere else body.workspaceIds, actor
    )
    changed(recorded.position)
    return read_revision(store, revision_id)


@router.get("/targets")
def targets(
    store: StoreDep,
    _: Consistent,
    kind: TargetKind | None = None,
    agent_id: Annotated[AgentId | None, Query(alias="agentId")] = None,
    workspace_id: WorkspaceQuery = None,
    limit: Annotated[int, Query(ge=1, le=200)] = 200,
) -> dict[str, Any]:
    """Targets with their effective content, most recently changed first."""
    rows = list_targets(store, kind=kind, agent_id=agent_id, workspace_id=workspace_id, limit=limit)
    return {"items": rows}


@router.get("/targets/{kind}/{agent_id}/{key}")
def target(
    kind: TargetKind,
    agent_id: AgentId,
    key: TargetKey,
    store: StoreDep,
    _: Consistent,
    workspace_id: WorkspaceQuery = None,
) -> dict[str, Any]:
    """Effective content, `evolutionManaged`, and the history of changes (oldest first);
    of the target for every workspace, or of `workspaceId`'s."""
    return read_target(store, kind, agent_id, key, workspace_id)


@router.put("/targets/{kind}/{agent_id}/{key}")
def edit_target(
    kind: TargetKind,
    agent_id: AgentId,
    key: TargetKey,
    body: TargetEdit,
    app: AppDep,
    store: StoreDep,
    autonomy: AutonomyDep,
    actor: ActorDep,
    changed: LearnedChange,
    workspace_id: WorkspaceQuery = None,
) -> dict[str, Any]:
    """A user edit: sets the content; the target becomes user-owned (evolution keeps off)."""
    if workspace_id is not None:
        app.get_workspace(workspace_id)
    recorded = autonomy.autonomy.edit_target(kind, agent_id, key, body.content, actor, workspace_id)
    changed(recorded.position)
    return read_target(store, kind, agent_id, key, workspace_id)


@router.post("/targets/{kind}/{agent_id}/{key}/hand-back")
def hand_back_target(
    kind: TargetKind,
    agent_id: AgentId,
    key: TargetKey,
    store: StoreDep,
    autonomy: AutonomyDep,
    actor: ActorDep,
    changed: LearnedChange,
    workspace_id: WorkspaceQuery = None,
) -> dict[str, Any]:
    """Return a user-owned target to evolution; its content stays as the person left it."""
    recorded = autonomy.autonomy.hand_back_target(kind, agent_id, key, actor, workspace_id)
    changed(recorded.position)
    return read_target(store, kind, agent_id, key, workspace_id)
