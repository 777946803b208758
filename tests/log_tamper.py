"""Direct edits of the stored event table, as an attacker with database access would make them."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from uuid import UUID, uuid4

import psycopg

from infra.settings import Settings


class Tamper:
    """Edits `stored_events` (SQLite, by rowid) or `tachograph_events` (by notification_id)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.sqlite = settings.database_url is None
        if self.sqlite:
            self.table, self.pos, self.ph = "stored_events", "rowid", "?"
        else:
            schema = settings.database_schema
            self.table, self.pos, self.ph = f'"{schema}".tachograph_events', "notification_id", "%s"

    @contextmanager
    def _cursor(self) -> Iterator[Any]:
        if self.sqlite:
            lite = sqlite3.connect(self.settings.sqlite_path, isolation_level=None)
            try:
                lite.execute("BEGIN IMMEDIATE")
                yield lite.cursor()
                lite.execute("COMMIT")
            finally:
                lite.close()
        else:
            assert self.settings.database_url is not None
            conninfo = self.settings.database_url.conninfo()
            with psycopg.connect(conninfo) as conn, conn.transaction(), conn.cursor() as cur:
                yield cur

    def _sql(self, sql: str) -> str:
        return sql.format(t=self.table, pos=self.pos).replace("?", self.ph)

    def payload(self, position: int) -> bytes:
        with self._cursor() as cur:
            cur.execute(self._sql("SELECT state FROM {t} WHERE {pos} = ?"), (position,))
            return bytes(cur.fetchone()[0])

    def flip_payload_byte(self, position: int, needle: bytes) -> None:
        """Change one byte of the stored payload (the first byte of `needle` in it)."""
        state = bytearray(self.payload(position))
        index = bytes(state).index(needle)
        state[index] = state[index] ^ 0x01
        with self._cursor() as cur:
            cur.execute(
                self._sql("UPDATE {t} SET state = ? WHERE {pos} = ?"), (bytes(state), position)
            )

    def delete(self, position: int) -> None:
        with self._cursor() as cur:
            cur.execute(self._sql("DELETE FROM {t} WHERE {pos} = ?"), (position,))

    def swap(self, a: int, b: int) -> None:
        """Exchange the log positions of two events."""
        with self._cursor() as cur:
            for src, dst in ((a, -1), (b, a), (-1, b)):
                cur.execute(self._sql("UPDATE {t} SET {pos} = ? WHERE {pos} = ?"), (dst, src))

    def insert_forged(self, position: int, like: int) -> UUID:
        """Insert a forged event at `position`, moving that event and every later one on by one."""
        forged = uuid4()
        with self._cursor() as cur:
            # Two steps through negative positions so the unique position never collides.
            cur.execute(
                self._sql("UPDATE {t} SET {pos} = -{pos} - 1 WHERE {pos} >= ?"), (position,)
            )
            cur.execute(self._sql("UPDATE {t} SET {pos} = -{pos} WHERE {pos} < 0"))
            cur.execute(self._sql("SELECT topic, state FROM {t} WHERE {pos} = ?"), (like,))
            topic, state = cur.fetchone()
            cur.execute(
                self._sql(
                    "INSERT INTO {t} ({pos}, originator_id, originator_version, topic, state) "
                    "VALUES (?, ?, 1, ?, ?)"
                ),
                (position, forged.hex if self.sqlite else forged, topic, bytes(state)),
            )
        return forged
