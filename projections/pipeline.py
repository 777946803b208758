"""The learning loop at a glance: counts and latest times over the signals, learned and
deliveries read models (signals in, decisions made, lessons learned, reverts, deliveries)."""

from __future__ import annotations

from typing import Any

from domain.reflection import STRATEGIES
from domain.signal import SIGNAL_KINDS, SIGNAL_STATES
from projections.store import Cursor, ReadStore


def _where(agent_id: str | None, *conditions: str) -> tuple[str, list[Any]]:
    clauses = list(conditions)
    params: list[Any] = []
    if agent_id is not None:
        clauses.append("agent_id = ?")
        params.append(agent_id)
    return (" WHERE " + " AND ".join(clauses) if clauses else ""), params


def _grouped(cur: Cursor, sql: str, params: list[Any], names: tuple[str, ...]) -> dict[str, int]:
    counts = dict.fromkeys(names, 0)
    cur.execute(sql, params)
    for row in cur.fetchall():
        counts[str(row["k"])] = int(row["n"])
    return counts


def _count_and_latest(cur: Cursor, sql: str, params: list[Any]) -> tuple[int, str | None]:
    cur.execute(sql, params)
    row = cur.fetchone()
    if row is None:
        return 0, None
    return int(row["n"] or 0), _iso(row["latest"])


def _iso(value: Any) -> str | None:
    if value is None or isinstance(value, str):
        return value
    return str(value.isoformat())


def pipeline_summary(store: ReadStore, agent_id: str | None = None) -> dict[str, Any]:
    """Signals by kind and status, decisions by strategy, revisions learned, reverts and
    deliveries made, each with its latest time; every kind, status and strategy present."""
    with store.transaction(write=False) as cur:
        where, params = _where(agent_id)
        by_kind = _grouped(
            cur, f"SELECT kind AS k, COUNT(*) AS n FROM rm_signals{where} GROUP BY kind",
            params, SIGNAL_KINDS,
        )  # fmt: skip
        by_status = _grouped(
            cur, f"SELECT status AS k, COUNT(*) AS n FROM rm_signals{where} GROUP BY status",
            params, SIGNAL_STATES,
        )  # fmt: skip
        total, signal_at = _count_and_latest(
            cur, f"SELECT COUNT(*) AS n, MAX(created_at) AS latest FROM rm_signals{where}", params
        )
        done, done_params = _where(agent_id, "status = 'completed'")
        by_strategy = _grouped(
            cur, f"SELECT strategy AS k, COUNT(*) AS n FROM rm_signals{done} GROUP BY strategy",
            done_params, STRATEGIES,
        )  # fmt: skip
        decided, decided_at = _count_and_latest(
            cur,
            f"SELECT COUNT(*) AS n, MAX(updated_at) AS latest FROM rm_signals{done}",
            done_params,
        )
        revision_sql = "SELECT COUNT(*) AS n, MAX(at) AS latest FROM rm_learned_revisions"
        learned_where, learned_params = _where(agent_id, "reverts_revision_id IS NULL")
        learned, learned_at = _count_and_latest(cur, revision_sql + learned_where, learned_params)
        revert_where, revert_params = _where(agent_id, "reverts_revision_id IS NOT NULL")
        reverts, revert_at = _count_and_latest(cur, revision_sql + revert_where, revert_params)
        deliveries = _deliveries(cur, agent_id)
    return {
        "signals": {
            "total": total,
            "byKind": by_kind,
            "byStatus": by_status,
            "latestAt": signal_at,
        },
        "decisions": {"total": decided, "byStrategy": by_strategy, "latestAt": decided_at},
        "revisions": {"learned": learned, "latestAt": learned_at},
        "reverts": {"count": reverts, "latestAt": revert_at},
        "deliveries": deliveries,
    }


def _deliveries(cur: Cursor, agent_id: str | None) -> dict[str, Any]:
    where, params = _where(agent_id)
    # One hook dispatch or task attempt is one event: its carried items share its position.
    cur.execute(
        "SELECT COUNT(DISTINCT position) AS n, COUNT(*) AS items, "
        "COUNT(DISTINCT session_id) AS sessions, "
        "COUNT(DISTINCT CASE WHEN task_id IS NOT NULL THEN position END) AS attempts, "
        f"MAX(at) AS latest FROM rm_learned_deliveries{where}",
        params,
    )
    row = cur.fetchone() or {}
    return {
        "count": int(row.get("n") or 0),
        "items": int(row.get("items") or 0),
        "sessions": int(row.get("sessions") or 0),
        "taskAttempts": int(row.get("attempts") or 0),
        "latestAt": _iso(row.get("latest")),
    }
