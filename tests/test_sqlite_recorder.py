"""SQLite appends: one autocommitted statement per batch, positions where the log holds them."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from eventsourcing.persistence import IntegrityError, StoredEvent

from infra.sqlite_recorder import ROWS_PER_STATEMENT

TOPIC = "tests:Event"


def stored(originator_id: uuid.UUID | str | None = None, version: int = 1) -> StoredEvent:
    return StoredEvent(originator_id or uuid.uuid4(), version, TOPIC, b'{"n":1}')


def where(recorder: Any, events: list[StoredEvent]) -> list[int]:
    held = {
        (n.originator_id, n.originator_version): n.id
        for n in recorder.select_notifications(1, limit=10_000)
    }
    return [held[(e.originator_id, e.originator_version)] for e in events]


@pytest.mark.parametrize("store_kind", ["sqlite"], indirect=True)
@pytest.mark.parametrize("size", [1, 7, ROWS_PER_STATEMENT, ROWS_PER_STATEMENT + 57])
def test_reported_positions_are_where_the_log_holds_each_event(recorder: Any, size: int) -> None:
    recorder.insert_events([stored()])  # the log does not start empty
    batch = [stored() for _ in range(size)]
    reported = recorder.insert_events(batch)
    assert list(reported) == where(recorder, batch)
    assert list(reported) == list(range(reported[0], reported[0] + size))


@pytest.mark.parametrize("store_kind", ["sqlite"], indirect=True)
def test_a_conflict_anywhere_in_a_batch_appends_none_of_it(recorder: Any) -> None:
    first = stored()
    recorder.insert_events([first])
    before = recorder.max_notification_id()
    batch = [stored(), stored(), stored(first.originator_id, 1), stored()]
    with pytest.raises(IntegrityError):
        recorder.insert_events(batch)
    assert recorder.max_notification_id() == before
    after = [stored(first.originator_id, 2)]
    assert list(recorder.insert_events(after)) == where(recorder, after) == [before + 1]
