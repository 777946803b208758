"""Policy routes: the active documents, their history, and the commands that change them.

Reading needs a reader key; recording, activating, rolling back and removing are for
operators and admins (api/auth.py: a POST outside the hook routes), so an agent token
can never loosen the rules that judge its own calls.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Query
from pydantic import AfterValidator, Field, StrictStr
from starlette.concurrency import run_in_threadpool

from api.deps import ActorDep, AppDep, CommitDep, Consistent, PoliciesDep, StoreDep
from api.input_limits import StrictJSONRoute
from api.routes.activity import ISO_WITH_ZONE
from api.schemas import Strict
from infra.policy_source import MAX_SOURCE_BYTES
from services import policies as reads
from services.policy_backtest import run_backtest

router = APIRouter(prefix="/api/policy", tags=["policy"], route_class=StrictJSONRoute)

WorkspaceQuery = Annotated[str | None, Query(alias="workspaceId", min_length=1, max_length=64)]


class RevisionIn(Strict):
    """`POST /api/policy/revisions`: a document (JSON or YAML text) for one scope."""

    source: Annotated[StrictStr, Field(min_length=1, max_length=MAX_SOURCE_BYTES)]
    # The workspace whose calls it judges; absent: every workspace (the global scope).
    workspaceId: Annotated[StrictStr, Field(min_length=1, max_length=64)] | None = None


class RemoveIn(Strict):
    """`POST /api/policy/remove`: leave a scope with no active revision."""

    workspaceId: Annotated[StrictStr, Field(min_length=1, max_length=64)] | None = None


# An ISO-8601 time with a zone (a string: pydantic would also take a number as seconds).
def _a_time(value: str) -> str:
    """A time the pattern admits but the calendar does not (month 13) is a 422 too."""
    datetime.fromisoformat(value.replace("Z", "+00:00"))
    return value


Moment = Annotated[StrictStr, Field(pattern=ISO_WITH_ZONE), AfterValidator(_a_time)]


class BacktestIn(Strict):
    """`POST /api/policy/backtest`: a candidate document tried against the record."""

    source: Annotated[StrictStr, Field(min_length=1, max_length=MAX_SOURCE_BYTES)]
    # The calls recorded in [since, until); absent: from the first, up to the last.
    since: Moment | None = None
    until: Moment | None = None
    # Only the calls of this workspace's sessions; absent: every workspace's.
    workspaceId: Annotated[StrictStr, Field(min_length=1, max_length=64)] | None = None


def _moment(value: str | None) -> datetime | None:
    return None if value is None else datetime.fromisoformat(value.replace("Z", "+00:00"))


@router.get("")
def active(store: StoreDep, _: Consistent) -> dict[str, Any]:
    """The active revision of each scope (the global one first), with its source."""
    return {"items": reads.active_revisions(store)}


@router.get("/revisions")
def revisions(
    store: StoreDep,
    _: Consistent,
    workspace_id: WorkspaceQuery = None,
    every_scope: Annotated[bool, Query(alias="all")] = False,
) -> dict[str, Any]:
    """A scope's revisions newest first (`all=true`: every scope's), each marked active or
    not, and what happened to the scope (activations, rollbacks, removals)."""
    return {
        "items": reads.revisions(store, workspace_id, every_scope),
        "history": reads.history(store, workspace_id),
    }


@router.get("/revisions/{revision_id}")
def revision(revision_id: str, store: StoreDep, _: Consistent) -> dict[str, Any]:
    """One revision with its source."""
    return reads.revision(store, revision_id)


@router.post("/revisions", status_code=201)
async def record(
    body: RevisionIn, policies: PoliciesDep, store: StoreDep, actor: ActorDep, commit: CommitDep
) -> dict[str, Any]:
    """Record a document as its scope's next revision, validated in full first (a bad rule
    is a 422 naming its id and the problem; nothing is recorded). It bites once activated."""

    def run() -> dict[str, Any]:
        revision_id, recorded = policies.record(body.source, body.workspaceId, actor)
        commit(recorded.position)
        return reads.revision(store, revision_id)

    return await run_in_threadpool(run)


@router.post("/revisions/{revision_id}/activate")
async def activate(
    revision_id: str, policies: PoliciesDep, store: StoreDep, actor: ActorDep, commit: CommitDep
) -> dict[str, Any]:
    """Make a revision the one that judges its scope's calls (already active: no change)."""

    def run() -> dict[str, Any]:
        commit(policies.activate(revision_id, actor).position)
        return reads.revision(store, revision_id)

    return await run_in_threadpool(run)


@router.post("/revisions/{revision_id}/rollback")
async def rollback(
    revision_id: str, policies: PoliciesDep, store: StoreDep, actor: ActorDep, commit: CommitDep
) -> dict[str, Any]:
    """Make an earlier revision active again, recorded as a compensating event (409 when
    it is the active one, or newer than it)."""

    def run() -> dict[str, Any]:
        commit(policies.roll_back(revision_id, actor).position)
        return reads.revision(store, revision_id)

    return await run_in_threadpool(run)


@router.post("/remove")
async def remove(
    body: RemoveIn, policies: PoliciesDep, store: StoreDep, actor: ActorDep, commit: CommitDep
) -> dict[str, Any]:
    """Leave a scope with no active revision; its history stays on the record."""

    def run() -> dict[str, Any]:
        commit(policies.remove(body.workspaceId, actor).position)
        return {"items": reads.active_revisions(store)}

    return await run_in_threadpool(run)


@router.post("/backtest")
async def backtest(
    body: BacktestIn, app: AppDep, store: StoreDep, actor: ActorDep
) -> dict[str, Any]:
    """What a candidate would have done to the recorded calls: how many it judged, how
    many it would have decided differently (by outcome), each rule's hits with examples,
    and the calls whose recorded facts were cut. Records only who ran which digest."""
    return await run_in_threadpool(
        run_backtest,
        app,
        store,
        body.source,
        since=_moment(body.since),
        until=_moment(body.until),
        workspace_id=body.workspaceId,
        actor=actor,
    )
