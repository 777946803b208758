"""Appending to the PostgreSQL log in one round trip, through a function in the schema.

The library appends in pipeline mode: lock the table, NOTIFY, and INSERT from an array
of a composite type, then COMMIT. psycopg drives that pipeline and escapes each event's
bytes into the composite's text form in Python, holding the interpreter lock the event
loop needs: a batch of 8 events cost ~2.4 ms of CPU here and ~4 ms of wall time. The
library's own database function would take one round trip but skips the table lock,
which lets a log follower miss events. This function keeps every statement of the
library's append (lock_timeout, the table lock that orders commits by notification id,
NOTIFY, the INSERT) and is called with four binary arrays as one autocommit statement:
~0.5 ms of CPU and ~1.3 ms of wall time for the same batch. A duplicate
(originator_id, originator_version) still fails the whole statement with an
IntegrityError and appends nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from eventsourcing.persistence import StoredEvent
from psycopg import sql

# Serialises CREATE OR REPLACE FUNCTION between processes starting together (two
# concurrent replacements of one function fail with "tuple concurrently updated").
_INSTALL_LOCK_KEY = 0x7AC0_6BAA


class AppendFunction:
    """`insert_events` for a PostgresApplicationRecorder: one call of a schema function."""

    def __init__(self, recorder: Any) -> None:
        datastore = recorder.datastore
        self.datastore = datastore
        table = sql.Identifier(datastore.schema, recorder.events_table_name)
        function = sql.Identifier(datastore.schema, f"{recorder.events_table_name}_append"[:63])
        self.create = sql.SQL(
            "CREATE OR REPLACE FUNCTION {function}"
            "(ids {id_type}[], versions bigint[], topics text[], states bytea[]) "
            "RETURNS SETOF bigint LANGUAGE plpgsql AS $$ BEGIN "
            "SET LOCAL lock_timeout = {timeout}; "
            "LOCK TABLE {table} IN EXCLUSIVE MODE; "
            "NOTIFY {channel}; "
            "RETURN QUERY INSERT INTO {table} (originator_id, originator_version, topic, state) "
            "SELECT * FROM unnest(ids, versions, topics, states) RETURNING notification_id; "
            "END $$"
        ).format(
            function=function,
            id_type=sql.Identifier(datastore.originator_id_type),
            timeout=sql.Literal(f"{datastore.lock_timeout}s"),
            table=table,
            channel=sql.Identifier(recorder.channel_name),
        )
        self.call = sql.SQL(
            "SELECT notification_id FROM {function}(%s, %s, %s, %b) AS appended(notification_id)"
        ).format(function=function)

    def install(self) -> None:
        """Create or replace the function (idempotent; at start-up, beside the tables)."""
        with self.datastore.transaction(commit=True) as curs:
            curs.execute("SELECT pg_advisory_xact_lock(%s)", (_INSTALL_LOCK_KEY,))
            curs.execute(self.create)

    @staticmethod
    def columns(stored_events: Sequence[StoredEvent]) -> tuple[list[Any], ...]:
        """The function's four arguments: one array per column."""
        return (
            [e.originator_id for e in stored_events],
            [e.originator_version for e in stored_events],
            [e.topic for e in stored_events],
            [e.state for e in stored_events],
        )

    def __call__(self, stored_events: Sequence[StoredEvent]) -> list[int]:
        if not stored_events:
            return []
        columns = self.columns(stored_events)
        # The datastore's context turns psycopg errors into the library's (IntegrityError...).
        with self.datastore.get_connection() as conn:
            rows = conn.execute(self.call, columns, prepare=True).fetchall()
        return [row["notification_id"] for row in rows]
