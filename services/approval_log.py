"""Approvals as the hook path looks them up (ingest/ports.py `ApprovalLog`): the log for
requests and their outcomes, the approvals read model for what other calls settled."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from uuid import UUID

from eventsourcing.domain import Aggregate

from domain.application import Tachograph
from domain.approval import ABANDONED, PENDING, Approval
from projections.approvals import reusable_approval, session_allowance
from projections.store import ReadStore


class AppApprovals:
    """Approvals in the log; lookups the hook path makes go to the approvals read model,
    and to what this process settled itself (it may not be projected yet)."""

    def __init__(
        self,
        app: Tachograph,
        store: ReadStore,
        workspace_of: Callable[[UUID], str | None],
        reuse_within_s: float,
    ) -> None:
        self.app = app
        self.store = store
        self._workspace_of = workspace_of
        self._reuse_within_s = reuse_within_s
        # (session, tool, summary) -> approval, for calls asked about by this process.
        self._recent: dict[tuple[UUID, str, str | None], UUID] = {}

    def request(self, approval: Approval) -> Approval:
        requested = self.app.request_approval(approval)
        self._remember(requested)
        return requested

    def load(self, approval_id: UUID) -> Approval | None:
        try:
            found: Aggregate = self.app.repository.get(approval_id)
        except Exception:  # noqa: BLE001 - AggregateNotFoundError, or the store is down
            return None
        return found if isinstance(found, Approval) else None

    def expire(self, approval_id: UUID, at: datetime) -> Approval:
        return self.app.expire_approval(approval_id, at)

    def abandon(self, approval_id: UUID, at: datetime) -> Approval:
        return self.app.abandon_approval(approval_id, at)

    def workspace(self, session_id: UUID) -> str | None:
        return self._workspace_of(session_id)  # cached where it is looked up (bootstrap)

    def allowance(self, session_id: UUID, tool_name: str) -> UUID | None:
        found = session_allowance(self.store, str(session_id), tool_name)
        return UUID(found) if found else None

    def reusable(self, session_id: UUID, tool_name: str, summary: str | None) -> UUID | None:
        mine = self._recent.get((session_id, tool_name, summary))
        if mine is not None:
            approval = self.load(mine)
            if approval is not None and self._still_answers(approval):
                return mine
        found = reusable_approval(
            self.store, str(session_id), tool_name, summary, self._reuse_within_s
        )
        return UUID(found) if found else None

    def _still_answers(self, approval: Approval) -> bool:
        if approval.status == PENDING:
            return True
        if approval.status == ABANDONED:
            return False  # nobody heard it: the same call asks anew
        settled_at = approval.modified_on
        return (datetime.now(UTC) - settled_at).total_seconds() <= self._reuse_within_s

    def _remember(self, approval: Approval) -> None:
        if len(self._recent) >= _RECENT_KEPT:
            self._recent.clear()
        key = (approval.session_id, approval.tool_name or "", approval.input_summary)
        self._recent[key] = approval.id


_RECENT_KEPT = 4096
