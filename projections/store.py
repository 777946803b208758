"""Read-model storage: one small SQL surface over SQLite and PostgreSQL.

SQL is written once with `?` placeholders; the PostgreSQL adapter rewrites them.
Rows come back as dicts.
"""

from __future__ import annotations

import logging
import re
import sqlite3
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any

import psycopg
from psycopg.rows import dict_row
from psycopg_pool import ConnectionPool

_log = logging.getLogger(__name__)


class StoreUnavailable(Exception):
    """The read-model database cannot be reached."""


class Cursor(ABC):
    """A cursor inside one read-model transaction."""

    dialect: str

    @abstractmethod
    def execute(self, sql: str, params: Sequence[Any] = ()) -> None: ...

    @abstractmethod
    def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None: ...

    @abstractmethod
    def fetchone(self) -> dict[str, Any] | None: ...

    @abstractmethod
    def fetchall(self) -> list[dict[str, Any]]: ...

    @property
    @abstractmethod
    def rowcount(self) -> int: ...

    def create(self, ddl: str) -> None:
        """Run a projection's CREATE statement, written portably, in this store's dialect."""
        self.execute(ddl)

    @abstractmethod
    def columns(self, table: str) -> set[str]:
        """The columns a table has now (empty when there is no such table)."""

    def drop(self, table: str) -> None:
        """Drop a table if it exists, and forget what was learned of its columns."""
        self.execute(f"DROP TABLE IF EXISTS {table}")


# A single-column BIGINT key: in SQLite only a column declared exactly INTEGER PRIMARY
# KEY becomes the table's rowid; any other spelling keeps a rowid *and* a separate
# index on the key, one more b-tree page written by every insert.
_BIGINT_KEY = re.compile(r"\b(\w+) BIGINT PRIMARY KEY\b")
# `CREATE TEXT SEARCH TABLE IF NOT EXISTS <name> (<column>)`: a table of (rowid, column)
# whose column is searched for substrings, in each store's own way (see `create`).
TEXT_SEARCH_TABLE = re.compile(r"CREATE TEXT SEARCH TABLE IF NOT EXISTS (\w+) \((\w+)\)")
# `CREATE TRIGRAM INDEX IF NOT EXISTS <name> ON <table> (<column>)`: PostgreSQL's way of
# searching a column for substrings (pg_trgm); SQLite searches its text-search table.
TRIGRAM_INDEX = re.compile(r"CREATE TRIGRAM INDEX IF NOT EXISTS (\w+) ON (\w+) \((\w+)\)")


class ReadStore(ABC):
    """Read-model database."""

    dialect: str

    @abstractmethod
    def transaction(self, *, write: bool = True) -> Any:
        """Context manager yielding a Cursor; commits on success."""

    def query(self, sql: str, params: Sequence[Any] = ()) -> list[dict[str, Any]]:
        """Run one read query."""
        with self.transaction(write=False) as cur:
            cur.execute(sql, params)
            rows: list[dict[str, Any]] = cur.fetchall()
            return rows

    def query_one(self, sql: str, params: Sequence[Any] = ()) -> dict[str, Any] | None:
        rows = self.query(sql, params)
        return rows[0] if rows else None

    @contextmanager
    def bulk_load(self) -> Iterator[None]:
        """Around a long run of large write transactions in this thread (a rebuild)."""
        yield

    @abstractmethod
    def vacuum(self, tables: Sequence[str]) -> None:
        """Reclaim the space and index entries of the rows deleted from these tables."""

    @abstractmethod
    def close(self) -> None: ...


class _SQLiteCursor(Cursor):
    dialect = "sqlite"

    def __init__(self, cur: sqlite3.Cursor) -> None:
        self._cur = cur

    def execute(self, sql: str, params: Sequence[Any] = ()) -> None:
        self._cur.execute(sql, tuple(params))

    def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        self._cur.executemany(sql, rows)

    def fetchone(self) -> dict[str, Any] | None:
        row = self._cur.fetchone()
        return dict(row) if row is not None else None

    def fetchall(self) -> list[dict[str, Any]]:
        return [dict(r) for r in self._cur.fetchall()]

    @property
    def rowcount(self) -> int:
        return self._cur.rowcount

    def columns(self, table: str) -> set[str]:
        self._cur.execute("SELECT name FROM pragma_table_info(?)", (table,))
        return {str(row[0]) for row in self._cur.fetchall()}

    def create(self, ddl: str) -> None:
        if TRIGRAM_INDEX.fullmatch(ddl):
            return  # substrings are found through the text-search table instead
        text_search = TEXT_SEARCH_TABLE.fullmatch(ddl)
        if text_search is not None:
            # FTS5's trigram tokenizer answers substring phrases (any case) from its index.
            name, column = text_search.groups()
            self._cur.execute(
                f"CREATE VIRTUAL TABLE IF NOT EXISTS {name} USING fts5({column}, "
                "tokenize='trigram')"
            )
            return
        # Both hold 64-bit integers in SQLite; PostgreSQL's INTEGER would not.
        self._cur.execute(_BIGINT_KEY.sub(r"\1 INTEGER PRIMARY KEY", ddl))


class SQLiteReadStore(ReadStore):
    """Read models in their own SQLite file, one connection per thread."""

    dialect = "sqlite"

    def __init__(self, path: Path) -> None:
        self.path = path
        self._local = threading.local()
        self._all: list[sqlite3.Connection] = []
        self._lock = threading.Lock()

    def _conn(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = sqlite3.connect(
                self.path, timeout=10, isolation_level=None, check_same_thread=False
            )
            conn.row_factory = sqlite3.Row
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute("PRAGMA cache_size=-32768")
            self._local.conn = conn
            with self._lock:
                self._all.append(conn)
        return conn

    @contextmanager
    def transaction(self, *, write: bool = True) -> Iterator[Cursor]:
        conn = self._conn()
        conn.execute("BEGIN IMMEDIATE" if write else "BEGIN")
        try:
            yield _SQLiteCursor(conn.cursor())
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")

    @contextmanager
    def bulk_load(self) -> Iterator[None]:
        # WAL checkpoints copy pages into the database file and sync it; every ~1,000
        # pages, a rebuild rewrote the same hot pages again and again (measured over
        # 200k events: 12.4k -> 14.1k events/s with this, the final checkpoint
        # included). This connection defers them to one at the end. Durability is
        # unchanged: every commit is in the WAL either way.
        conn = self._conn()
        conn.execute("PRAGMA wal_autocheckpoint=0")
        try:
            yield
        finally:
            conn.execute("PRAGMA wal_autocheckpoint=1000")
            conn.execute("PRAGMA wal_checkpoint(PASSIVE)")

    def vacuum(self, tables: Sequence[str]) -> None:
        """Nothing to do: in SQLite a deleted row leaves its b-trees at once."""

    def close(self) -> None:
        with self._lock:
            for conn in self._all:
                conn.close()
            self._all.clear()
        self._local = threading.local()


class _PGCursor(Cursor):
    dialect = "postgres"

    def __init__(
        self,
        cur: psycopg.Cursor[dict[str, Any]],
        *,
        copy: bool = False,
        pipeline: psycopg.Pipeline | None = None,
    ) -> None:
        self._cur = cur
        self._pipeline = pipeline
        # Bulk loading (a rebuild): plain multi-row inserts go in with COPY.
        self._copy = copy

    def create(self, ddl: str) -> None:
        text_search = TEXT_SEARCH_TABLE.fullmatch(ddl)
        trigram = TRIGRAM_INDEX.fullmatch(ddl)
        if text_search is None and trigram is None:
            self.execute(ddl)
            return
        name = (text_search or trigram).group(1)  # type: ignore[union-attr]
        self._cur.execute("SELECT to_regclass(%s) IS NOT NULL AS found", (name,))
        found = self._cur.fetchone()
        if found and found["found"]:
            return  # declared again at every start: no DDL, so no lock, when it exists
        if text_search is not None:
            # PostgreSQL searches the column itself (a trigram index beside it): the
            # text-search table stays empty here.
            self._cur.execute(
                f"CREATE TABLE {name} (rowid BIGINT PRIMARY KEY, "
                f"{text_search.group(2)} TEXT NOT NULL)"
            )
            return
        assert trigram is not None
        _, table, column = trigram.groups()
        # pg_trgm's GIN index answers ILIKE '%text%'. The extension lives in `public`
        # (one per database, whatever schema the read models use); where it cannot be
        # installed, searches read every row instead.
        try:
            with self._cur.connection.transaction():
                self._cur.execute("CREATE EXTENSION IF NOT EXISTS pg_trgm SCHEMA public")
                self._cur.execute(
                    f"CREATE INDEX {name} ON {table} USING gin ({column} public.gin_trgm_ops)"
                )
        except psycopg.Error as exc:
            _log.warning("no trigram index on %s (%s): text searches scan it", table, exc)

    def execute(self, sql: str, params: Sequence[Any] = ()) -> None:
        self._cur.execute(_pg(sql), _pg_params(params))

    def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        insert = _plain_insert(sql)
        if insert is None or len(rows) < 2:
            self._cur.executemany(_pg(sql), [_pg_params(r) for r in rows])
            return
        # One INSERT ... SELECT FROM unnest(column arrays) instead of one statement per
        # row: psycopg spends ~20 µs of Python on each statement it pipelines, and a
        # multi-row VALUES list is re-parsed every time (too long for its query cache).
        table, columns, tail = insert
        if self._copy and not tail.strip():
            # COPY formats rows in C and the server skips unnest's arrays: per 5,000
            # rows about half the wall time and three quarters of the client CPU of the
            # array form (measured; a 100k-event rebuild ran ~6% faster). Not allowed in
            # pipeline mode, nor with ON CONFLICT.
            clean = "\x00" not in "".join([v for r in rows for v in r if isinstance(v, str)])
            with self._cur.copy(f"COPY {table} ({', '.join(columns)}) FROM STDIN") as copy:
                for row in rows:
                    copy.write_row(row if clean else _pg_params(row))
            return
        types = self._column_types(table)
        # %b: arrays go over in binary, which psycopg dumps far faster than as text.
        arrays = ", ".join(f"%b::{types[c]}[]" for c in columns)
        target = f"{table} ({', '.join(columns)})".replace("%", "%%")
        statement = f"INSERT INTO {target} SELECT * FROM unnest({arrays}){tail.replace('%', '%%')}"
        by_column = zip(*rows, strict=True)
        self._cur.execute(statement, [_pg_column(list(column)) for column in by_column])

    def columns(self, table: str) -> set[str]:
        self._cur.execute(
            "SELECT column_name FROM information_schema.columns "
            "WHERE table_schema = current_schema() AND table_name = %s",
            (table,),
        )
        return {str(r["column_name"]) for r in self._cur.fetchall()}

    def drop(self, table: str) -> None:
        super().drop(table)
        _COLUMN_TYPES.pop(table, None)  # re-created with the columns its DDL has now

    def _column_types(self, table: str) -> dict[str, str]:
        types = _COLUMN_TYPES.get(table)
        if types is None:
            self._cur.execute(
                "SELECT column_name, data_type FROM information_schema.columns "
                "WHERE table_schema = current_schema() AND table_name = %s",
                (table,),
            )
            # Through `fetchall` (synced): in pipeline mode a bare fetch could be handed an
            # earlier statement's result (seen at start-up: "DELETE 0").
            types = {r["column_name"]: r["data_type"] for r in self.fetchall()}
            _COLUMN_TYPES[table] = types
        return types

    def fetchone(self) -> dict[str, Any] | None:
        self._synced()
        return self._cur.fetchone()

    def fetchall(self) -> list[dict[str, Any]]:
        self._synced()
        return self._cur.fetchall()

    def _synced(self) -> None:
        # In pipeline mode psycopg fetches a result only for a cursor that has none yet;
        # when an earlier statement's result had already arrived (read while sending),
        # a fetch returned that one ("the last operation didn't produce records:
        # DELETE 0", seen about once in three task-board fills). Syncing first hands
        # every pending result to its cursor, so this one ends on its latest statement.
        if self._pipeline is not None:
            self._pipeline.sync()

    @property
    def rowcount(self) -> int:
        return self._cur.rowcount


_PG_SQL_CACHE: dict[str, str] = {}


def _pg_params(params: Sequence[Any]) -> tuple[Any, ...]:
    # PostgreSQL text cannot hold NUL. The API refuses it, but an event that carries one
    # anyway (a hook handler's reason, an old event) must not jam a projection forever:
    # it is stored as U+FFFD instead, the same on every replay.
    return tuple(
        p.replace("\x00", "\ufffd") if isinstance(p, str) and "\x00" in p else p for p in params
    )


def _pg_column(values: list[Any]) -> list[Any]:
    """`_pg_params` for one column of many rows: one scan of its text for the rare NUL."""
    if "\x00" in "".join([v for v in values if isinstance(v, str)]):
        return list(_pg_params(values))
    return values


_INSERT = re.compile(
    r"INSERT INTO\s+(\w+)\s*\(([\w\s,]+)\)\s*VALUES\s*\((?:\?\s*,\s*)*\?\)(.*)", re.S | re.I
)
_INSERTS: dict[str, tuple[str, list[str], str] | None] = {}
# Per table name: column types never change for a name (tables are created, dropped
# and re-created by the same DDL; a table rebuilt for an added column is forgotten
# when it is dropped, `_PGCursor.drop`).
_COLUMN_TYPES: dict[str, dict[str, str]] = {}


def _plain_insert(sql: str) -> tuple[str, list[str], str] | None:
    """(table, columns, tail) of an INSERT of one row of placeholders, or None.

    Not for ON CONFLICT ... DO UPDATE: one statement may not update a row twice,
    which separate statements may.
    """
    if sql not in _INSERTS:
        match = _INSERT.fullmatch(sql.strip())
        if match is None or "?" in match.group(3) or re.search(r"\bDO\s+UPDATE\b", sql, re.I):
            _INSERTS[sql] = None
        else:
            table, columns, tail = match.groups()
            _INSERTS[sql] = (table, [c.strip() for c in columns.split(",")], tail)
    return _INSERTS[sql]


def _pg(sql: str) -> str:
    converted = _PG_SQL_CACHE.get(sql)
    if converted is None:
        converted = sql.replace("%", "%%").replace("?", "%s")
        _PG_SQL_CACHE[sql] = converted
    return converted


class PostgresReadStore(ReadStore):
    """Read models in the configured PostgreSQL schema, through a psycopg pool."""

    dialect = "postgres"

    def __init__(
        self,
        conninfo: str,
        schema: str,
        *,
        max_size: int = 10,
        breaker: Any = None,
        check: Callable[[Any], None] | None = None,
    ) -> None:
        self.schema = schema
        # Shared with the event store (infra/pg_recorder.py): one database, one verdict on
        # whether it is reachable, so reads fail at once during an outage too.
        self.breaker = breaker
        self.pool = ConnectionPool(
            conninfo,
            min_size=1,
            max_size=max_size,
            kwargs={
                "row_factory": dict_row,
                "options": f"-c search_path={schema} -c lock_timeout=5000",
                "connect_timeout": 2,
            },
            timeout=2,
            check=check or ConnectionPool.check_connection,
            open=True,
        )
        self._bulk = threading.local()

    @contextmanager
    def bulk_load(self) -> Iterator[None]:
        self._bulk.on = True
        try:
            yield
        finally:
            self._bulk.on = False

    @contextmanager
    def transaction(self, *, write: bool = True) -> Iterator[Cursor]:
        probe = self.breaker.enter() if self.breaker is not None else False
        error: BaseException | None = None
        bulk = write and getattr(self._bulk, "on", False)
        try:
            with (
                self.pool.connection() as conn,
                # Pipeline mode: projection batches are mostly writes, which then go out
                # without a network round trip each (a fetch still syncs when needed).
                # Bulk loads use COPY instead, which pipeline mode does not allow.
                conn.pipeline() if write and not bulk else nullcontext() as pipeline,
                conn.transaction(),
                conn.cursor(row_factory=dict_row) as cur,
            ):
                yield _PGCursor(cur, copy=bulk, pipeline=pipeline)
        except BaseException as exc:
            error = exc
            raise
        finally:
            if self.breaker is not None:
                self.breaker.leave(probe, error)

    def vacuum(self, tables: Sequence[str]) -> None:
        """VACUUM outside any transaction (it cannot run in one). A table another runner
        is vacuuming already is skipped, not waited for."""
        if not tables:
            return
        with self.pool.connection() as conn:
            conn.autocommit = True
            try:
                conn.execute(f"VACUUM (SKIP_LOCKED) {', '.join(tables)}")
            finally:
                conn.autocommit = False

    def close(self) -> None:
        self.pool.close()
