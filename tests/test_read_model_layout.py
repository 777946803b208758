"""The hottest read-model tables keep no b-tree their readers do not use.

Every index is one more page written by each event the runner applies; on SQLite those
pages decide how often the read store's WAL checkpoints, and each checkpoint's sync
stalls the appends beside it. The layout holds after a rebuild is swapped in, too.
"""

from __future__ import annotations

from bootstrap import Services
from projections.replay import replay, select_projections
from tests.audit_support import bulk_history


def indexes(services: Services, table: str) -> set[str]:
    if services.store.dialect == "sqlite":
        sql = "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = ?"
    else:
        sql = (
            "SELECT indexname AS name FROM pg_indexes "
            "WHERE schemaname = current_schema() AND tablename = ?"
        )
    return {str(r["name"]) for r in services.store.query(sql, (table,))}


def expected(services: Services) -> dict[str, set[str]]:
    if services.store.dialect == "sqlite":
        # The chain's position is the table's rowid; the audit's key is its only other index.
        return {
            "rm_log_links": {"rm_log_links_seq"},
            "rm_hook_audit": {"sqlite_autoindex_rm_hook_audit_1", "rm_hook_audit_at"},
        }
    return {
        "rm_log_links": {"rm_log_links_pkey", "rm_log_links_seq"},
        "rm_hook_audit": {"rm_hook_audit_pkey", "rm_hook_audit_at"},
    }


def test_chain_links_and_hook_records_are_written_to_few_b_trees(services: Services) -> None:
    bulk_history(services.app, 10)
    services.runner.catch_up()
    assert {t: indexes(services, t) for t in expected(services)} == expected(services)
    chosen = select_projections(services.projections, ["log_checkpoints", "hook_audit"])
    reports = replay(services.app, services.store, chosen, swap=True)
    assert [r.swapped for r in reports] == [True, True]
    assert {t: indexes(services, t) for t in expected(services)} == expected(services)
    # Positions past 2**31 still fit: the SQLite key is a 64-bit rowid.
    with services.store.transaction() as cur:
        cur.execute(
            "INSERT INTO rm_log_links (position, seq, aggregate_id, version, type, link, leaf) "
            "VALUES (?, ?, 'a', 1, 't', 'l', 'f')",
            (2**40, 2**40),
        )
    assert services.store.query_one("SELECT MAX(position) AS p FROM rm_log_links") == {"p": 2**40}
