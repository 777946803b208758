"""SQLite recorder that appends a batch of events with one autocommitted statement.

The library's SQLite application recorder opens a transaction (BEGIN), inserts event
by event to read each new row's position (`lastrowid`), and commits. Every one of
those calls releases the interpreter lock inside SQLite and then waits to get it
back from a busy request thread: under ingest load a batch of ~8 events took ~7 ms
from start to durable for ~1.5 ms of CPU, most of it in those waits. Here a batch of
up to ROWS_PER_STATEMENT events is one multi-row INSERT in autocommit mode: SQLite
runs one statement as its own transaction (atomic, and committed and synced inside
the same call), so the whole append is one hand-off of the lock.

Positions: the events table is a rowid table that is never deleted from, and SQLite
gives each new row one more than the largest rowid in the table; one statement,
holding the write lock throughout, therefore numbers its rows consecutively, ending
at `lastrowid`. tests/test_group_commit.py checks every reported position against
where the log holds the event. Larger batches go in within the library's
transaction, ROWS_PER_STATEMENT rows per INSERT, their positions checked against
the first row's; appends that carry a tracking record take the library's path.

Processes that append to one file (serve and its OTLP receiver, cli/otlp_receiver.py)
take turns through an advisory lock beside it (`WriterTurns`) around that statement.
SQLite alone would make the second writer sleep and retry (1, 2, 5 ms ... when the lock
is busy), so a hook's append queued behind a receiver's batch for milliseconds more
than the batch took; waiting on the lock file, it goes the moment the batch is in.

A process that appends alone (serve without a receiver process, the default) takes no
turns (`takes_turns`, set by the composition root from the settings). Each `flock`
call releases the interpreter lock, and the committing thread then waits behind the
busy event loop to get it back, twice per batch: without them, ingest rose 5 % in ten
alternated pairs (docs/performance.md). Another process appending all the same (a CLI
command) is still safe: SQLite's own lock orders the two, only with its retry sleeps.
"""

from __future__ import annotations

import fcntl
import os
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, nullcontext
from itertools import chain
from typing import Any
from uuid import UUID

from eventsourcing.persistence import (
    DatabaseError,
    DataError,
    IntegrityError,
    InterfaceError,
    InternalError,
    NotSupportedError,
    OperationalError,
    PersistenceError,
    ProgrammingError,
    StoredEvent,
)
from eventsourcing.sqlite import SQLiteApplicationRecorder, SQLiteCursor

# Rows per INSERT: 4 parameters each stays far below SQLite's bound on parameters.
ROWS_PER_STATEMENT = 200

# The library's translation of sqlite3 errors (SQLiteTransaction.__exit__), subclasses first.
_ERRORS: tuple[tuple[type[sqlite3.Error], type[PersistenceError]], ...] = (
    (sqlite3.IntegrityError, IntegrityError),
    (sqlite3.InterfaceError, InterfaceError),
    (sqlite3.DataError, DataError),
    (sqlite3.OperationalError, OperationalError),
    (sqlite3.InternalError, InternalError),
    (sqlite3.ProgrammingError, ProgrammingError),
    (sqlite3.NotSupportedError, NotSupportedError),
    (sqlite3.DatabaseError, DatabaseError),
)


class WriterTurns:
    """An exclusive advisory lock (flock) on `<database>-writers.lock`, held around one
    append: the next process's append waits on it and is woken when it is released.

    One per process and database file; threads of one process share it (a lock on one
    open file is its holder's), so within a process SQLite's own lock decides as before.
    Only appends of this recorder take it; any other writer waits on SQLite as before.
    """

    def __init__(self, database: str) -> None:
        self._fd = os.open(f"{database}-writers.lock", os.O_RDWR | os.O_CREAT, 0o600)
        self._local = threading.Lock()

    @contextmanager
    def turn(self) -> Iterator[None]:
        with self._local:  # one thread of this process at a time holds the turn
            fcntl.flock(self._fd, fcntl.LOCK_EX)  # waits with the interpreter lock released
            try:
                yield
            finally:
                fcntl.flock(self._fd, fcntl.LOCK_UN)


class BatchedSQLiteApplicationRecorder(SQLiteApplicationRecorder):
    _turns: WriterTurns | None = None
    takes_turns: bool = False

    def writer_turns(self) -> WriterTurns | None:
        """The lock file's turns, for a database on disk (none in memory) shared with
        another appending process."""
        if not self.takes_turns:
            return None
        pool = self.datastore.pool
        if self._turns is None and not pool.is_sqlite_memory_mode:
            self._turns = WriterTurns(pool.db_name)
        return self._turns

    def insert_events(
        self, stored_events: Sequence[StoredEvent], **kwargs: Any
    ) -> Sequence[int] | None:
        count = len(stored_events)
        if any(value is not None for value in kwargs.values()) or not (
            0 < count <= ROWS_PER_STATEMENT
        ):
            return super().insert_events(stored_events, **kwargs)
        params = chain.from_iterable(map(_row, stored_events))
        statement = f"INSERT INTO {self.events_table_name} VALUES " + ",".join(
            ["(?,?,?,?)"] * count
        )
        turns = self.writer_turns()
        with (
            turns.turn() if turns is not None else nullcontext(),
            self.datastore.get_connection(commit=True) as conn,
            _library_errors(),
        ):
            cursor = conn.cursor()
            try:
                # The connection is in autocommit mode: one statement, one transaction.
                cursor.execute(statement, list(params))
                last = int(cursor.lastrowid)
            finally:
                cursor.sqlite_cursor.close()
        return list(range(last - count + 1, last + 1))

    def _insert_events(
        self, c: SQLiteCursor, stored_events: Sequence[StoredEvent], **kwargs: Any
    ) -> Sequence[int] | None:
        if len(stored_events) < 2:
            return super()._insert_events(c, stored_events, **kwargs)
        params = [_row(s) for s in stored_events]
        # Above ROWS_PER_STATEMENT events, inside the library's transaction: chunks of
        # ROWS_PER_STATEMENT rows, positions derived and checked. The insert comes
        # first: a read first would take a shared lock and turn a concurrent writer's
        # wait into an immediate "database is locked".
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


def _row(s: StoredEvent) -> tuple[Any, ...]:
    """A stored event as the events table's columns, ids spelt as the library spells them."""
    return (
        s.originator_id.hex if isinstance(s.originator_id, UUID) else s.originator_id,
        s.originator_version,
        s.topic,
        s.state,
    )


@contextmanager
def _library_errors() -> Iterator[None]:
    try:
        yield
    except sqlite3.Error as exc:
        for raw, translated in _ERRORS:
            if isinstance(exc, raw):
                raise translated(exc) from exc
        raise PersistenceError(exc) from exc
