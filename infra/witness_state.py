"""A witness's durable state: per log origin, the size and root it last cosigned (SQLite).

Checking a submission against the stored state and recording the new state happen in
one IMMEDIATE transaction: it takes the database's write lock before reading, so two
submissions (from threads or processes) are judged one after the other and neither can
write back a smaller tree over a larger one (the rollback race of C2SP tlog-witness).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path

from domain.cosignature import LogState

_SCHEMA = """
CREATE TABLE IF NOT EXISTS witness_log (
    origin TEXT PRIMARY KEY,
    size INTEGER NOT NULL,
    root BLOB NOT NULL
)
"""


class WitnessState:
    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        with self._connect() as db:
            db.execute("PRAGMA journal_mode=WAL")
            db.execute(_SCHEMA)

    def _connect(self) -> sqlite3.Connection:
        # Autocommit mode: transactions are opened explicitly with BEGIN IMMEDIATE.
        db = sqlite3.connect(self.path, timeout=30, isolation_level=None)
        # The protocol wants the new state persisted before the cosignature is answered.
        db.execute("PRAGMA synchronous=FULL")
        return db

    def get(self, origin: str) -> LogState | None:
        db = self._connect()
        try:
            row = db.execute(
                "SELECT size, root FROM witness_log WHERE origin = ?", (origin,)
            ).fetchone()
        finally:
            db.close()
        return LogState(int(row[0]), bytes(row[1])) if row else None

    def advance(self, origin: str, judge: Callable[[LogState | None], LogState]) -> LogState:
        """Judge the stored state and record what `judge` returns, atomically.

        Whatever `judge` raises rolls the transaction back and propagates.
        """
        db = self._connect()
        try:
            db.execute("BEGIN IMMEDIATE")
            try:
                row = db.execute(
                    "SELECT size, root FROM witness_log WHERE origin = ?", (origin,)
                ).fetchone()
                known = LogState(int(row[0]), bytes(row[1])) if row else None
                new = judge(known)
                db.execute(
                    "INSERT INTO witness_log (origin, size, root) VALUES (?, ?, ?) "
                    "ON CONFLICT (origin) DO UPDATE SET size = excluded.size, root = excluded.root",
                    (origin, new.size, new.root),
                )
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise
        finally:
            db.close()
        return new
