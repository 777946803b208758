"""Appending to the PostgreSQL log in three plain round trips instead of a pipeline.

The library appends in pipeline mode: lock the table, NOTIFY, and INSERT from an array
of a composite type. psycopg drives that pipeline and escapes each event's bytes into
the composite's text form in Python, holding the interpreter lock the event loop needs:
a batch of 8 events cost ~2.4 ms of CPU here. The same statements sent as one simple
query (BEGIN; SET LOCAL lock_timeout; LOCK TABLE; NOTIFY), an INSERT from four binary
arrays, and COMMIT cost ~1.0 ms, and the thread waits on the socket with the lock
released. Nothing else changes: the table lock still orders commits by notification id
(so a follower misses nothing), NOTIFY still wakes listeners, and a duplicate
(originator_id, originator_version) is still an IntegrityError that appends nothing.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any

import psycopg
from eventsourcing.persistence import StoredEvent
from psycopg import sql
from psycopg.pq import TransactionStatus


class PlainAppend:
    """`insert_events` for a PostgresApplicationRecorder, without pipeline mode."""

    def __init__(self, recorder: Any) -> None:
        datastore = recorder.datastore
        self.recorder = recorder
        self.datastore = datastore
        # The library's own lock statements (lock_timeout, then the table lock) and channel.
        self.head = sql.SQL("; ").join(
            [
                sql.SQL("BEGIN"),
                *recorder.lock_table_statements,
                sql.SQL("NOTIFY {}").format(sql.Identifier(recorder.channel_name)),
            ]
        )
        self.insert = sql.SQL(
            "INSERT INTO {schema}.{table} (originator_id, originator_version, topic, state)"
            " SELECT * FROM unnest(%s::{id_type}[], %s::bigint[], %s::text[], %b::bytea[])"
            " RETURNING notification_id"
        ).format(
            schema=sql.Identifier(datastore.schema),
            table=sql.Identifier(recorder.events_table_name),
            id_type=sql.Identifier(datastore.originator_id_type),
        )

    def __call__(self, stored_events: Sequence[StoredEvent]) -> list[int]:
        if not stored_events:
            return []
        columns = (
            [e.originator_id for e in stored_events],
            [e.originator_version for e in stored_events],
            [e.topic for e in stored_events],
            [e.state for e in stored_events],
        )
        # The datastore's context turns psycopg errors into the library's (IntegrityError...).
        with self.datastore.get_connection() as conn:
            try:
                conn.execute(self.head, prepare=False)  # several statements: never prepared
                with conn.cursor() as curs:
                    curs.execute(self.insert, columns, prepare=True)
                    # The library's step between INSERT and COMMIT, kept so it stays the seam
                    # where tests hold a transaction open (tests/test_projection_commit_order.py).
                    ids: list[int] = self.recorder._fetch_ids_after_insert_events(
                        curs, stored_events
                    )
                conn.execute("COMMIT", prepare=False)
            except BaseException:
                _roll_back(conn)
                raise
        return ids


def _roll_back(conn: psycopg.Connection[Any]) -> None:
    """End a failed append's transaction so the pool gets the connection back idle."""
    if conn.closed or conn.info.transaction_status == TransactionStatus.IDLE:
        return
    with contextlib.suppress(psycopg.Error):  # a broken connection: the pool discards it
        conn.rollback()
