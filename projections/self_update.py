"""Read-side questions of the idle self-update job (the command side re-checks everything)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from projections.base import iso
from projections.schedules import due_user_schedule_ids, schedule_row
from projections.store import ReadStore


def busy(store: ReadStore, now: datetime) -> bool:
    """Whether a user schedule is due or any task is queued, running or cancelling."""
    if due_user_schedule_ids(store, now):
        return True
    row = store.query_one(
        "SELECT id FROM rm_tasks WHERE status IN ('queued', 'running', 'cancelling') LIMIT 1"
    )
    return row is not None


def self_update_candidates(store: ReadStore, now: datetime) -> list[str]:
    """Due, unpaused system schedules of eligible workspaces, least recently cycled first."""
    rows = store.query(
        "SELECT s.id FROM rm_schedules s JOIN rm_workspaces w ON w.id = s.workspace_id "
        "WHERE s.source = 'self-update' AND s.paused = ? AND w.self_update = ? "
        "AND s.next_run_at IS NOT NULL AND s.next_run_at <= ? "
        "ORDER BY COALESCE(s.last_run_at, '') ASC, s.workspace_id ASC",
        (False, True, iso(now)),
    )
    return [r["id"] for r in rows]


def reconcile_workspaces(store: ReadStore) -> list[str]:
    """Every workspace that has selfUpdate on or a system schedule (reconcile looks at both)."""
    rows = store.query(
        "SELECT id FROM rm_workspaces WHERE self_update = ? UNION "
        "SELECT workspace_id AS id FROM rm_schedules WHERE source = 'self-update'",
        (True,),
    )
    return sorted(r["id"] for r in rows)


def system_schedules(store: ReadStore) -> list[dict[str, Any]]:
    """The self-update schedules, by workspace."""
    rows = store.query(
        "SELECT * FROM rm_schedules WHERE source = 'self-update' ORDER BY workspace_id"
    )
    return [schedule_row(r) for r in rows]
