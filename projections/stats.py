"""Operational queries over the read models (metrics, health)."""

from __future__ import annotations

from domain.task_policy import TASK_STATES
from projections.store import ReadStore


def task_status_counts(store: ReadStore) -> dict[str, int]:
    """How many tasks the board shows in each status (every status present, zeros too)."""
    rows = store.query("SELECT status, COUNT(*) AS n FROM rm_tasks GROUP BY status")
    counts = dict.fromkeys(TASK_STATES, 0)
    counts.update({str(r["status"]): int(r["n"]) for r in rows})
    return counts
