"""Approval routes: what waits for an operator, and the operator's decision.

Listing needs a reader key; deciding is for operators (api/auth.py: a POST outside the
hook routes), so an agent token can never approve its own call.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any, Literal
from uuid import UUID

from fastapi import APIRouter, Query
from pydantic import Field, StrictBool
from starlette.concurrency import run_in_threadpool

from api.deps import ActorDep, AppDep, CommitDep, Consistent, StoreDep
from api.input_limits import StrictJSONRoute
from api.schemas import Strict
from domain.approval import APPROVAL_STATES, REASON_LIMIT
from domain.errors import NotFound
from projections.approvals import get_approval_row, list_approvals
from projections.session_titles import with_session_titles
from projections.store import ReadStore

router = APIRouter(prefix="/api/approvals", tags=["approvals"], route_class=StrictJSONRoute)

ApprovalStatus = Literal["pending", "decided", "expired", "abandoned"]
assert set(ApprovalStatus.__args__) == set(APPROVAL_STATES)  # type: ignore[attr-defined]


class ApprovalDecision(Strict):
    """`POST /api/approvals/{id}/decide`."""

    decision: Literal["allow", "deny"]
    reason: Annotated[str, Field(min_length=1, max_length=REASON_LIMIT)] | None = None
    # Allow later calls of this tool in the session without asking (allow only).
    forSession: StrictBool = False


def read_approval(store: ReadStore, approval_id: UUID) -> dict[str, Any]:
    row = get_approval_row(store, str(approval_id))
    if row is None:
        raise NotFound(f"Approval {approval_id} does not exist.")
    return with_session_titles(store, [row])[0]


@router.get("")
def approvals(
    store: StoreDep,
    _: Consistent,
    status: ApprovalStatus | None = None,
    session_id: Annotated[UUID | None, Query(alias="sessionId")] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
) -> dict[str, Any]:
    """Approvals newest first: pending ones with the seconds left, settled ones with who."""
    rows = list_approvals(
        store,
        status=status,
        session_id=str(session_id) if session_id else None,
        limit=limit,
    )
    return {"items": with_session_titles(store, rows)}


@router.get("/{approval_id}")
def approval(approval_id: UUID, store: StoreDep, _: Consistent) -> dict[str, Any]:
    """One approval."""
    return read_approval(store, approval_id)


@router.post("/{approval_id}/decide")
async def decide(
    approval_id: UUID,
    body: ApprovalDecision,
    app: AppDep,
    store: StoreDep,
    actor: ActorDep,
    commit: CommitDep,
) -> dict[str, Any]:
    """Allow or deny a pending call; one already decided, expired or abandoned (its caller
    stopped waiting) → 409 naming its state.

    The held hook request wakes as soon as this is durable, on whichever replica holds it.
    """

    def record() -> dict[str, Any]:
        _, position = app.decide_approval(
            approval_id, body.decision, actor, body.reason, body.forSession, datetime.now(UTC)
        )
        commit(position)
        return read_approval(store, approval_id)

    return await run_in_threadpool(record)
