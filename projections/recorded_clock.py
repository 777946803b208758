"""`recordedAt`: a time that agrees with the log's order.

An event's own timestamp is taken when it is created, before the group commit appends
it, so under concurrent writers the log's order and those times disagree by about a
millisecond. A read model that lists dispatches therefore also gives each one
`recorded_at = max(its own time, the previous one's recorded_at)`: never earlier than
the event was created, never earlier than anything before it in the log, so sorting
by it is sorting by log position. The running value is kept in a one-row table per
projection, so a restart or a rebuild from the same log gives the same values.
"""

from __future__ import annotations

from projections.store import Cursor

DDL = "CREATE TABLE IF NOT EXISTS {t} (name TEXT PRIMARY KEY, at TEXT NOT NULL)"


class RecordedClock:
    """Per batch: read the running value, advance it per event, write it back once."""

    def __init__(self) -> None:
        self.table = ""
        self._cur: Cursor | None = None
        self._at = ""
        self._read: str | None = None

    def begin(self, cur: Cursor) -> None:
        # Read on first use: most batches of most projections stamp nothing.
        self._cur = cur
        self._read = None

    def stamp(self, at: str) -> str:
        """The recorded_at of the next event in log order whose own time is `at`."""
        if self._read is None:
            assert self._cur is not None, "stamp() before begin()"
            self._cur.execute(f"SELECT at FROM {self.table} WHERE name = 'recorded'")
            row = self._cur.fetchone()
            self._at = self._read = "" if row is None else str(row["at"])
        if at > self._at:
            self._at = at
        return self._at

    def end(self, cur: Cursor) -> None:
        if self._read is not None and self._at != self._read:
            cur.execute(
                f"INSERT INTO {self.table} (name, at) VALUES ('recorded', ?) "
                "ON CONFLICT (name) DO UPDATE SET at = excluded.at",
                (self._at,),
            )
            self._read = self._at
