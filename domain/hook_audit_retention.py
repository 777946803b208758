"""Hook audit retention as events, so a rebuilt audit equals the pruned live one."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

from eventsourcing.application import AggregateNotFoundError
from eventsourcing.domain import Aggregate, event
from eventsourcing.persistence import IntegrityError

from domain.application import Tachograph
from domain.base import TachographAggregate, declare_event_versions
from domain.ids import stable_id

RETENTION = timedelta(days=30)
RETENTION_ID = stable_id("hook-audit-retention")


class HookAuditRetention(TachographAggregate):
    """Singleton: each event says "audit records before this instant are gone"."""

    TOPIC = "HookAuditRetention"

    @staticmethod
    def create_id(**_: Any) -> UUID:
        return RETENTION_ID

    @event("Created", topic="HookAuditRetention.Created")
    def __init__(self, before: datetime, actor: str) -> None:
        self.before = before

    @event("Applied", topic="HookAuditRetention.Applied")
    def apply_retention(self, before: datetime, actor: str) -> None:
        self.before = before


def prune_hook_audit(app: Tachograph, now: datetime, min_interval: timedelta) -> int | None:
    """Append a retention event unless one was appended within min_interval (replica-safe)."""
    before = now - RETENTION
    try:
        retention: Aggregate = app.repository.get(RETENTION_ID)
    except AggregateNotFoundError:
        retention = HookAuditRetention(before=before, actor="system")
    else:
        assert isinstance(retention, HookAuditRetention)
        if before - retention.before < min_interval:
            return None
        retention.apply_retention(before, "system")
    try:
        return app.record(retention)
    except IntegrityError:
        return None  # another replica pruned at the same moment


declare_event_versions(HookAuditRetention, Created=1, Applied=1)
