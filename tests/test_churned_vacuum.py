"""The runner vacuums the read models whose rows are capped (`Projection.churned`).

On PostgreSQL a deleted row stays in its table and index until a vacuum, and the
capping DELETE walks past every one of them: with autovacuum off (as on the database
the suite runs against) or between its runs, a busy session's cap grew slower with
every event. On SQLite a deleted row leaves at once, and the vacuum is a no-op.
"""

from __future__ import annotations

import time

import pytest

from bootstrap import Services
from domain.lifecycle import LifecycleEvent
from ingest.loop import run_sync
from projections.hook_audit import AUDIT_CAP

EVENTS = AUDIT_CAP + 100


def ingest_calls(services: Services, count: int) -> str:
    session_id, _, _ = services.ingest.open_session("default", None, "test")
    for n in range(count):
        call = LifecycleEvent("PostToolUse", tool_name="Bash", tool_call_id=f"call-{n}")
        run_sync(services.ingest.ingest(session_id, call, actor="test"))
    return str(session_id)


def vacuums(services: Services, table: str) -> int:
    row = services.store.query_one(
        "SELECT vacuum_count AS n FROM pg_stat_user_tables "
        "WHERE schemaname = current_schema() AND relname = ?",
        (table,),
    )
    return int(row["n"]) if row else 0


@pytest.mark.parametrize("store_kind", ["postgres"])
def test_capped_tables_are_vacuumed_every_so_many_events(services: Services) -> None:
    with services.store.transaction() as cur:  # any vacuum seen is then the runner's
        for table in ("rm_hook_audit", "rm_timeline"):
            cur.execute(f"ALTER TABLE {table} SET (autovacuum_enabled = false)")
    services.runner.vacuum_every = 200  # batches hold up to 500: at least one vacuum
    session_id = ingest_calls(services, EVENTS)
    services.runner.catch_up()
    # Reported to the statistics as each vacuum ends; read by a new transaction.
    deadline = time.monotonic() + 10
    while vacuums(services, "rm_timeline") < 1 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert vacuums(services, "rm_hook_audit") >= 1
    assert vacuums(services, "rm_timeline") >= 1
    kept = services.store.query(
        "SELECT COUNT(*) AS n FROM rm_hook_audit WHERE session_id = ?", (session_id,)
    )
    assert kept[0]["n"] == AUDIT_CAP  # capping is as exact as before


def test_the_cap_holds_with_a_vacuum_between_batches(services: Services) -> None:
    """Either store: a vacuum after every few events changes no read model."""
    services.runner.vacuum_every = 7
    session_id = ingest_calls(services, EVENTS)
    services.runner.catch_up()
    rows = services.store.query(
        "SELECT position, seq FROM rm_hook_audit WHERE session_id = ? ORDER BY position, seq",
        (session_id,),
    )
    assert len(rows) == AUDIT_CAP
    newest = services.store.query_one(
        "SELECT MAX(position) AS p FROM rm_hook_audit WHERE session_id = ?", (session_id,)
    )
    assert newest is not None and rows[-1]["position"] == newest["p"]
