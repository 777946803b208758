"""Event-store configuration: the same Application on SQLite (default) or PostgreSQL."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path

import psycopg

from domain.application import Tachograph
from infra.pool_check import ping_when_stale
from infra.pool_reconnect import steady_reconnects
from infra.settings import Settings

# Page size of a new SQLite event log. A row lives on one leaf page, so SQLite's default
# 4 KiB page holds two events of 1.4 KiB (a tool call with its facts) and leaves a third
# of the page empty: the log grew by ~2.1 KiB per such event, and every commit wrote
# (and fsynced) twice the pages its events needed. A 16 KiB page holds eleven of them
# (~1.5 KiB per event on disk). An existing log keeps the page size it was created with.
LOG_PAGE_SIZE = 16 * 1024

# Any constant works; it only has to be the same in every process sharing the database.
_SCHEMA_LOCK_KEY = 0x7AC0_6BA9


def application_env(settings: Settings) -> dict[str, str]:
    """eventsourcing environment for the configured store."""
    url = settings.database_url
    if url is None:
        settings.data_dir.mkdir(parents=True, exist_ok=True)
        create_sqlite_log(settings.sqlite_path)
        return {
            "PERSISTENCE_MODULE": "eventsourcing.sqlite",
            "SQLITE_DBNAME": str(settings.sqlite_path),
            "SQLITE_LOCK_TIMEOUT": "5",
            "APPLICATION_RECORDER_TOPIC": "infra.sqlite_recorder:BatchedSQLiteApplicationRecorder",
        }
    return {
        "PERSISTENCE_MODULE": "eventsourcing.postgres",
        "POSTGRES_DBNAME": url.dbname,
        "POSTGRES_HOST": url.host,
        "POSTGRES_PORT": str(url.port),
        "POSTGRES_USER": url.user,
        "POSTGRES_PASSWORD": url.password,
        "POSTGRES_SCHEMA": settings.database_schema,
        "APPLICATION_RECORDER_TOPIC": "infra.pg_recorder:FastFailPostgresApplicationRecorder",
        # Also the pool's wait for a free connection: bounds a request during an outage.
        "POSTGRES_CONNECT_TIMEOUT": "2",
        "POSTGRES_LOCK_TIMEOUT": "5",
        # Per process: up to 3 × TACHOGRAPH_DATABASE_POOL_SIZE log connections (README).
        "POSTGRES_POOL_SIZE": str(settings.database_pool_size),
        "POSTGRES_MAX_OVERFLOW": str(2 * settings.database_pool_size),
        "POSTGRES_MAX_WAITING": "64",
        "POSTGRES_PRE_PING": "y",
        # Off on purpose: the DB function skips the table lock and lets followers miss events.
        "POSTGRES_ENABLE_DB_FUNCTIONS": "n",
    }


def create_sqlite_log(path: Path) -> None:
    """Create the SQLite log file with LOG_PAGE_SIZE pages, unless it exists already.

    The page size can only be chosen before a database's first page is written, and WAL
    mode (which the library then finds already set) fixes it. A log created by another
    process in the meantime is left as it is: `page_size` is a no-op on it.
    """
    if path.exists() and path.stat().st_size > 0:
        return
    with closing(sqlite3.connect(path, isolation_level=None)) as conn:
        conn.execute(f"PRAGMA page_size = {LOG_PAGE_SIZE}")
        conn.execute("PRAGMA journal_mode = WAL")


@contextmanager
def schema_lock(settings: Settings) -> Iterator[None]:
    """Serialise schema creation across processes (PostgreSQL DDL races on pg_type otherwise)."""
    url = settings.database_url
    if url is None:
        yield
        return
    with psycopg.connect(url.conninfo(), autocommit=True, connect_timeout=5) as conn:
        conn.execute("SELECT pg_advisory_lock(%s)", (_SCHEMA_LOCK_KEY,))
        try:
            conn.execute(
                psycopg.sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(
                    psycopg.sql.Identifier(settings.database_schema)
                )
            )
            yield
        finally:
            conn.execute("SELECT pg_advisory_unlock(%s)", (_SCHEMA_LOCK_KEY,))


def open_application(settings: Settings) -> Tachograph:
    """Construct the Application, creating its tables idempotently."""
    app = Tachograph(env=application_env(settings))
    if settings.database_url is None:
        app.recorder.takes_turns = settings.sqlite_writer_turns  # type: ignore[attr-defined]
        return app
    steady_reconnects(app.recorder.datastore.pool)  # type: ignore[attr-defined]
    # POSTGRES_PRE_PING installs psycopg_pool's ping-every-checkout; the library offers
    # no other check, so it is swapped on the pool it built (see infra/pool_check.py).
    app.recorder.datastore.pool._check = ping_when_stale  # type: ignore[attr-defined]
    return app
