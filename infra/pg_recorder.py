"""PostgreSQL recorder that fails fast during an outage.

The library retries each call ten times, each waiting up to the pool timeout: a
request would hang ~50 s when the database is down. Two attempts keep the one
retry that heals a stale pooled connection and let the API answer 503 quickly.
"""

from __future__ import annotations

from typing import Any

from eventsourcing.persistence import InterfaceError, OperationalError
from eventsourcing.postgres import PostgresApplicationRecorder
from eventsourcing.utils import retry


def _fail_fast(method: Any) -> Any:
    return retry((InterfaceError, OperationalError), max_attempts=2, wait=0.05)(method.__wrapped__)


class FastFailPostgresApplicationRecorder(PostgresApplicationRecorder):
    """The stock recorder with a two-attempt retry budget."""

    insert_events = _fail_fast(PostgresApplicationRecorder.insert_events)
    select_events = _fail_fast(PostgresApplicationRecorder.select_events)
    select_notifications = _fail_fast(PostgresApplicationRecorder.select_notifications)
    max_notification_id = _fail_fast(PostgresApplicationRecorder.max_notification_id)
