"""Auditor reads of the stored log: one aggregate's stream with log positions, decoded events."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any
from uuid import UUID

from eventsourcing.persistence import Notification

from domain.application import Tachograph
from infra.log_scan import aggregate_rows

_ENVELOPE_KEYS = ("timestamp", "originator_id", "originator_version", "originator_topic")


def event_record(app: Tachograph, n: Notification) -> dict[str, Any]:
    """Wire shape of one stored event: position, aggregate, version, type, at, data."""
    state = app.mapper.transcoder.decode(n.state)
    at = state.get("timestamp")
    data = {k: v for k, v in state.items() if k not in _ENVELOPE_KEYS}
    return {
        "position": n.id,
        "aggregateId": str(n.originator_id),
        "version": n.originator_version,
        "type": n.topic,
        "at": at,
        "data": data,
    }


def read_events(
    app: Tachograph, after: int, limit: int, types: Sequence[str] = ()
) -> list[Notification]:
    """Notifications after a position, in log order, optionally of some types only."""
    return list(
        app.recorder.select_notifications(
            start=after, limit=limit, topics=types, inclusive_of_start=False
        )
    )


def iter_events(
    app: Tachograph, after: int = 0, batch: int = 1000, types: Sequence[str] = ()
) -> Iterator[Notification]:
    """Every notification after a position (optionally of some types only), in batches."""
    while True:
        page = read_events(app, after, batch, types)
        if not page:
            return
        yield from page
        after = page[-1].id


def read_stream(app: Tachograph, aggregate_id: UUID) -> list[Notification]:
    """One aggregate's events with their log positions, oldest first."""
    return [
        Notification(
            id=row["position"],
            originator_id=aggregate_id,
            originator_version=row["originator_version"],
            topic=row["topic"],
            state=bytes(row["state"]),
        )
        for row in aggregate_rows(app, aggregate_id)
    ]
