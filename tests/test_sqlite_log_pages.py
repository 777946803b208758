"""The SQLite log's page size: large enough that events carrying facts fill their pages."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from contextlib import closing
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from bench.load import CLAUDE_POST_TOOL_USE
from infra.event_store import LOG_PAGE_SIZE
from infra.settings import Settings
from tests.support import env_for

ROOT = Path(__file__).resolve().parents[1]

# A finished Write as Claude Code reports it (the benchmark's body): with its facts,
# ~1.4 KiB in the log.
WRITE = CLAUDE_POST_TOOL_USE


def page_size(path: Path) -> int:
    with closing(sqlite3.connect(path)) as conn:
        return int(conn.execute("PRAGMA page_size").fetchone()[0])


def exported(settings: Settings) -> str:
    """The whole log as `tachograph export` writes it."""
    done = subprocess.run(
        [sys.executable, "-m", "cli.main", "export"],
        env=env_for(settings),
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def record_writes(settings: Settings, count: int) -> list[str]:
    """Post `count` finished Writes; the ids of those the exported log holds."""
    ids = [f"toolu_{n:04d}" for n in range(count)]
    with TestClient(create_app(settings), raise_server_exceptions=False) as client:
        for tool_use_id in ids:
            response = client.post("/hooks/claude", json={**WRITE, "tool_use_id": tool_use_id})
            assert response.status_code == 200, response.text
    log = exported(settings)
    return [i for i in ids if f'"{i}"' in log]


def bytes_per_event(path: Path) -> tuple[float, float]:
    """The log file's size per event once the WAL is checkpointed into it, and the mean
    size of an event's row (its id, version, topic and state)."""
    with closing(sqlite3.connect(path)) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        count, row_bytes = conn.execute(
            "SELECT count(*), sum(length(originator_id) + length(topic) + length(state) + 8) "
            "FROM stored_events"
        ).fetchone()
    return path.stat().st_size / count, row_bytes / count


@pytest.mark.parametrize("store_kind", ["sqlite"], indirect=True)
def test_a_new_log_is_created_with_pages_that_hold_many_events(settings: Settings) -> None:
    # Enough events that the file's fixed pages (its schema, the index's root) do not
    # count: two 16 KiB pages over 300 events would be ~110 bytes of each.
    ids = [f"toolu_{n:04d}" for n in range(600)]
    assert record_writes(settings, 600) == ids
    log = settings.sqlite_path
    assert page_size(log) == LOG_PAGE_SIZE
    with closing(sqlite3.connect(log)) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    on_disk, row = bytes_per_event(log)
    # Rows of ~1.4 KiB on 4 KiB pages take ~2.1 KiB each (two to a page, 1.5x).
    assert row > 1300 and on_disk < 1.2 * row, (on_disk, row)


@pytest.mark.parametrize("store_kind", ["sqlite"], indirect=True)
def test_a_log_created_by_an_earlier_release_keeps_its_pages_and_its_events(
    settings: Settings,
) -> None:
    settings.data_dir.mkdir(parents=True)
    with closing(sqlite3.connect(settings.sqlite_path)) as conn:
        conn.execute("PRAGMA journal_mode = WAL")  # SQLite's default 4 KiB pages
        conn.execute("CREATE TABLE earlier (n INTEGER)")
    assert record_writes(settings, 5) == [f"toolu_{n:04d}" for n in range(5)]
    assert page_size(settings.sqlite_path) == 4096
    with closing(sqlite3.connect(settings.sqlite_path)) as conn:
        assert conn.execute("SELECT count(*) FROM earlier").fetchone()[0] == 0
