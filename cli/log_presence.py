"""Commands that read a log refuse to invent one.

Opening the Application creates its tables (and the SQLite file with its directory), so
an auditor who runs `tachograph verify` in the wrong directory would otherwise be told
"OK" about a log made a moment ago. The reading commands look first, create nothing,
and name what they looked for.
"""

from __future__ import annotations

import argparse
import sqlite3
from contextlib import closing
from pathlib import Path

from infra.settings import Settings

# eventsourcing names the PostgreSQL events table after the Application ("Tachograph").
PG_EVENTS_TABLE = "tachograph_events"
SQLITE_EVENTS_TABLE = "stored_events"


class NoLog(Exception):
    """The configured store holds no Tachograph log; the message names where we looked."""


def add_data_dir_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--data-dir",
        type=Path,
        metavar="DIR",
        help="the data directory to read (default TACHOGRAPH_DATA_DIR, else ./data)",
    )


def with_data_dir(settings: Settings, args: argparse.Namespace) -> Settings:
    """`--data-dir` over TACHOGRAPH_DATA_DIR, for the commands that take it."""
    data_dir = getattr(args, "data_dir", None)
    return settings if data_dir is None else settings.with_(data_dir=data_dir)


def require_log(settings: Settings) -> None:
    """Raise NoLog unless the configured store already holds a Tachograph log."""
    url = settings.database_url
    if url is None:
        _require_sqlite_log(settings.sqlite_path)
        return
    import psycopg

    where = f"PostgreSQL {url.host}:{url.port}/{url.dbname}, schema {settings.database_schema}"
    try:
        with psycopg.connect(url.conninfo(), connect_timeout=5) as conn:
            row = conn.execute(
                "SELECT 1 FROM information_schema.tables WHERE table_schema = %s"
                " AND table_name = %s",
                (settings.database_schema, PG_EVENTS_TABLE),
            ).fetchone()
    except psycopg.Error as exc:
        raise NoLog(f"cannot read {where}: {str(exc).strip()}") from None
    if row is None:
        raise NoLog(
            f"no Tachograph log in {where} (set TACHOGRAPH_DATABASE_URL and"
            " TACHOGRAPH_DATABASE_SCHEMA to the deployment's)"
        )


def _require_sqlite_log(path: Path) -> None:
    hint = "(run it where the server's data directory is, or pass --data-dir)"
    if not path.is_file() or path.stat().st_size == 0:
        raise NoLog(f"no Tachograph log at {path.resolve()} {hint}")
    # Read-only URI: looking must not create or change anything.
    try:
        with closing(sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)) as conn:
            row = conn.execute(
                "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?",
                (SQLITE_EVENTS_TABLE,),
            ).fetchone()
    except sqlite3.Error as exc:
        raise NoLog(f"cannot read {path.resolve()}: {exc}") from None
    if row is None:
        raise NoLog(f"{path.resolve()} is not a Tachograph log {hint}")
