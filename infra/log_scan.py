"""Raw reads of the stored log for verification: bytes as stored, no decoding, keyset pages."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from uuid import UUID

from eventsourcing.sqlite import SQLiteAggregateRecorder

from domain.application import Tachograph
from domain.log_chain import canonical_id
from domain.log_verify import StoredEvent


def _is_sqlite(app: Tachograph) -> bool:
    return isinstance(app.recorder, SQLiteAggregateRecorder)


def events_table(app: Tachograph) -> str:
    """Qualified name of the table holding the log (for tools and tamper tests)."""
    recorder: Any = app.recorder
    if _is_sqlite(app):
        return str(recorder.events_table_name)
    return f'"{recorder.datastore.schema}"."{recorder.events_table_name}"'


def _position_column(app: Tachograph) -> str:
    return "rowid" if _is_sqlite(app) else "notification_id"


def _query(app: Tachograph, sql: str, params: tuple[Any, ...]) -> list[Any]:
    recorder: Any = app.recorder
    if not _is_sqlite(app):
        sql = sql.replace("?", "%s")
    with recorder.datastore.transaction(commit=False) as cur:
        cur.execute(sql, params)
        return list(cur.fetchall())


def log_head(app: Tachograph) -> int:
    """Highest position in the log (0 when empty)."""
    return int(app.recorder.max_notification_id() or 0)


def count_events(app: Tachograph, upto: int) -> int:
    """How many events are stored at or below a position."""
    column = _position_column(app)
    rows = _query(
        app, f"SELECT COUNT(*) AS n FROM {events_table(app)} WHERE {column} <= ?", (upto,)
    )
    return int(rows[0]["n"])


def scan_events(app: Tachograph, upto: int, batch: int = 10_000) -> Iterator[StoredEvent]:
    """Every stored event at or below `upto`, in log order, payload bytes untouched."""
    column = _position_column(app)
    sql = (
        f"SELECT {column} AS position, originator_id, originator_version, topic, state "
        f"FROM {events_table(app)} WHERE {column} > ? AND {column} <= ? "
        f"ORDER BY {column} LIMIT ?"
    )
    after = 0
    while True:
        rows = _query(app, sql, (after, upto, batch))
        for row in rows:
            yield StoredEvent.of(
                int(row["position"]),
                canonical_id(row["originator_id"]),
                int(row["originator_version"]),
                str(row["topic"]),
                bytes(row["state"]),
            )
        if len(rows) < batch:
            return
        after = int(rows[-1]["position"])


def stored_position(app: Tachograph, aggregate_id: str, version: int) -> int | None:
    """Where the log stores one aggregate version now, if anywhere."""
    column = _position_column(app)
    rows = _query(
        app,
        f"SELECT {column} AS position FROM {events_table(app)} "
        "WHERE originator_id = ? AND originator_version = ?",
        (_stored_id(app, UUID(aggregate_id)), version),
    )
    return int(rows[0]["position"]) if rows else None


def aggregate_rows(app: Tachograph, aggregate_id: UUID) -> list[Any]:
    """One aggregate's stored rows (position, originator_version, topic, state), in order."""
    column = _position_column(app)
    return _query(
        app,
        f"SELECT {column} AS position, originator_version, topic, state "
        f"FROM {events_table(app)} WHERE originator_id = ? ORDER BY originator_version",
        (_stored_id(app, aggregate_id),),
    )


def _stored_id(app: Tachograph, aggregate_id: UUID) -> Any:
    # SQLite stores ids as hex text, PostgreSQL as uuid.
    return aggregate_id.hex if _is_sqlite(app) else aggregate_id


def scan_topic(
    app: Tachograph, topic: str, after: int, upto: int, span: int = 5_000
) -> Iterator[tuple[int, bytes]]:
    """(position, payload bytes) of every event of one type after `after` and at or below
    `upto`, in log order, `span` positions at a time (memory stays bounded).

    Pages are windows of positions, not `LIMIT`s: with a `LIMIT`, PostgreSQL whose
    statistics of a freshly filled log are stale sorted the whole rest of the range on
    disk for every page (seconds a page over a million events); a window's rows are
    few whatever plan it picks."""
    column = _position_column(app)
    sql = (
        f"SELECT {column} AS position, state FROM {events_table(app)} "
        f"WHERE {column} > ? AND {column} <= ? AND topic = ? ORDER BY {column}"
    )
    while after < upto:
        until = min(after + span, upto)
        for row in _query(app, sql, (after, until, topic)):
            yield int(row["position"]), bytes(row["state"])
        after = until


def event_at_or_after(app: Tachograph, position: int) -> tuple[int, bytes] | None:
    """The first stored event at or after a position: (its position, its payload)."""
    column = _position_column(app)
    rows = _query(
        app,
        f"SELECT {column} AS position, state FROM {events_table(app)} "
        f"WHERE {column} >= ? ORDER BY {column} LIMIT 1",
        (position,),
    )
    return (int(rows[0]["position"]), bytes(rows[0]["state"])) if rows else None
