"""SQLite recorder that appends a batch of events with one statement.

The library's SQLite application recorder inserts event by event to read each new
row's position (`lastrowid`). Under the group commit that is one statement per
event, and every statement step releases the interpreter lock and then waits to get
it back from a busy request thread (measured: most of a batch's wall time). Here a
batch goes in as one multi-row INSERT (one step), and the positions are derived:
inside the write transaction every insert takes max(rowid) + 1, so the batch's rows
are consecutive, ending at `last_insert_rowid()`. That is checked against the first
row's position, read in the same statement, not assumed; if it ever does not hold,
the positions are read back row by row.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import chain
from typing import Any
from uuid import UUID

from eventsourcing.persistence import StoredEvent
from eventsourcing.sqlite import SQLiteApplicationRecorder, SQLiteCursor

# Rows per INSERT: 4 parameters each stays far below SQLite's bound on parameters.
ROWS_PER_STATEMENT = 200


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
        for start in range(0, len(params), ROWS_PER_STATEMENT):
            rows = params[start : start + ROWS_PER_STATEMENT]
            c.execute(
                f"INSERT INTO {self.events_table_name} VALUES "
                + ",".join(["(?,?,?,?)"] * len(rows)),
                list(chain.from_iterable(rows)),
            )
        position = (
            f"SELECT rowid FROM {self.events_table_name} "
            "WHERE originator_id = ? AND originator_version = ?"
        )
        c.execute(f"SELECT last_insert_rowid(), ({position})", params[0][:2])
        last, first = (int(v) for v in c.fetchone())
        if last - first + 1 == len(params):
            return list(range(first, last + 1))
        positions = []
        for row in params:
            c.execute(position, row[:2])
            positions.append(int(c.fetchone()[0]))
        return positions
