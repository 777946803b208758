"""Daily maintenance: hook audit retention (30 days), recorded as an event."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from domain.application import Tachograph
from domain.hook_audit_retention import prune_hook_audit


def prune_hook_audit_job(app: Tachograph) -> int | None:
    """Append a retention event unless another replica did so in the last 23 hours."""
    return prune_hook_audit(app, datetime.now(UTC), min_interval=timedelta(hours=23))
