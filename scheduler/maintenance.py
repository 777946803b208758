"""Maintenance: hook audit retention (30 days, daily), recorded as an event; approvals
left pending past their deadline by a holder that went away."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from uuid import UUID

from domain.application import Tachograph
from domain.hook_audit_retention import prune_hook_audit
from projections.approvals import overdue_approvals
from projections.store import ReadStore


def prune_hook_audit_job(app: Tachograph) -> int | None:
    """Append a retention event unless another replica did so in the last 23 hours."""
    return prune_hook_audit(app, datetime.now(UTC), min_interval=timedelta(hours=23))


# A held request answers its own expiry; this settles those whose holder went away
# (the agent gave up, the process stopped) a little after their deadline.
ORPHAN_GRACE = timedelta(seconds=5)


def expire_orphaned_approvals_job(app: Tachograph, store: ReadStore) -> int:
    """Expire pending approvals past their deadline (a replica racing this one settles
    the same request once: the aggregate takes one outcome); how many were overdue."""
    now = datetime.now(UTC)
    overdue = overdue_approvals(store, now - ORPHAN_GRACE)
    for approval_id in overdue:
        app.expire_approval(UUID(approval_id), now)
    return len(overdue)
