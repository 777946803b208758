"""SQLite recorder that appends a batch of events with one statement.

The library's SQLite application recorder inserts event by event to read each new
row's position (`lastrowid`). Under the group commit that is one statement per
event, and each statement hands the interpreter lock to a busy request thread and
waits to get it back. Here a batch goes in with one `executemany`, and the positions
are derived: inside the write transaction every insert takes max(rowid) + 1, so the
batch's rows are consecutive, ending at `last_insert_rowid()`. That is checked against
the first row's position, not assumed; if it ever does not hold, the positions are
read back row by row.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from uuid import UUID

from eventsourcing.persistence import StoredEvent
from eventsourcing.sqlite import SQLiteApplicationRecorder, SQLiteCursor


class BatchedSQLiteApplicationRecorder(SQLiteApplicationRecorder):
    def _insert_events(
        self, c: SQLiteCursor, stored_events: Sequence[StoredEvent], **kwargs: Any
    ) -> Sequence[int] | None:
        if len(stored_events) < 2:
            return super()._insert_events(c, stored_events, **kwargs)
        params = [
            (
                s.originator_id.hex if isinstance(s.originator_id, UUID) else s.originator_id,
                s.originator_version,
                s.topic,
                s.state,
            )
            for s in stored_events
        ]
        # The insert comes first: a read first would take a shared lock and turn a
        # concurrent writer's wait into an immediate "database is locked".
        c.executemany(self.insert_events_statement, params)
        c.execute("SELECT last_insert_rowid()")
        last = int(c.fetchone()[0])
        first = self._position(c, params[0])
        if last - first + 1 == len(params):
            return list(range(first, last + 1))
        return [self._position(c, p) for p in params]

    def _position(self, c: SQLiteCursor, row: tuple[Any, ...]) -> int:
        c.execute(
            f"SELECT rowid FROM {self.events_table_name} "
            "WHERE originator_id = ? AND originator_version = ?",
            row[:2],
        )
        return int(c.fetchone()[0])
