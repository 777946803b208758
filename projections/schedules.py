"""Schedules read model."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from projections.base import Envelope, Projection, handles, iso
from projections.store import Cursor, ReadStore

_FIELD_COLUMNS = {
    "name": "name",
    "cron": "cron",
    "prompt": "prompt",
    "model": "model",
    "max_attempts": "max_attempts",
}


class SchedulesProjection(Projection):
    name = "schedules"
    tables = {
        "schedules": [
            "CREATE TABLE IF NOT EXISTS {t} (id TEXT PRIMARY KEY, workspace_id TEXT NOT NULL, "
            "source TEXT NOT NULL, name TEXT NOT NULL, cron TEXT NOT NULL, prompt TEXT NOT NULL, "
            "model TEXT, max_attempts INTEGER NOT NULL, paused BOOLEAN NOT NULL, "
            "next_run_at TEXT, last_run_at TEXT, last_task_id TEXT, position BIGINT NOT NULL, "
            "created_at TEXT NOT NULL, updated_at TEXT NOT NULL)",
            "CREATE INDEX IF NOT EXISTS {t}_pos ON {t} (position)",
            "CREATE INDEX IF NOT EXISTS {t}_due ON {t} (paused, next_run_at)",
        ]
    }

    @handles("Schedule.Created")
    def created(self, cur: Cursor, e: Envelope) -> None:
        d = e.data
        cur.execute(
            f"INSERT INTO {self.t['schedules']} (id, workspace_id, source, name, cron, prompt, "
            "model, max_attempts, paused, next_run_at, position, created_at, updated_at) "
            "VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
            (
                e.key,
                d["workspace"],
                d["source"],
                d["name"],
                d["cron"],
                d["prompt"],
                d["model"],
                d["max_attempts"],
                False,
                iso(d["next_run_at"]),
                e.position,
                e.at,
                e.at,
            ),
        )

    @handles("Schedule.Updated")
    def updated(self, cur: Cursor, e: Envelope) -> None:
        changes = {_FIELD_COLUMNS[k]: v for k, v in e.data["changes"].items()}
        self._update(cur, e, next_run_at=iso(e.data["next_run_at"]), **changes)

    @handles("Schedule.Paused")
    def paused(self, cur: Cursor, e: Envelope) -> None:
        self._update(cur, e, paused=True, next_run_at=None)

    @handles("Schedule.Resumed")
    def resumed(self, cur: Cursor, e: Envelope) -> None:
        self._update(cur, e, paused=False, next_run_at=iso(e.data["next_run_at"]))

    @handles("Schedule.Fired")
    def fired(self, cur: Cursor, e: Envelope) -> None:
        self._update(
            cur,
            e,
            last_run_at=iso(e.data["due_at"]),
            last_task_id=e.data["task_id"],
            next_run_at=iso(e.data["next_run_at"]),
        )

    @handles("Schedule.Deleted")
    def deleted(self, cur: Cursor, e: Envelope) -> None:
        cur.execute(f"DELETE FROM {self.t['schedules']} WHERE id = ?", (e.key,))

    def _update(self, cur: Cursor, e: Envelope, **columns: Any) -> None:
        columns["updated_at"] = e.at
        assignments = ", ".join(f"{c} = ?" for c in columns)
        cur.execute(
            f"UPDATE {self.t['schedules']} SET {assignments} WHERE id = ?",
            (*columns.values(), e.key),
        )


def schedule_row(r: dict[str, Any]) -> dict[str, Any]:
    """Wire shape of a schedule."""
    return {
        "id": r["id"],
        "workspaceId": r["workspace_id"],
        "source": r["source"],
        "name": r["name"],
        "cron": r["cron"],
        "prompt": r["prompt"],
        "model": r["model"],
        "maxAttempts": int(r["max_attempts"]),
        "paused": bool(r["paused"]),
        "nextRunAt": r["next_run_at"],
        "lastRunAt": r["last_run_at"],
        "lastTaskId": r["last_task_id"],
        "createdAt": r["created_at"],
        "updatedAt": r["updated_at"],
    }


def list_schedules(
    store: ReadStore, *, workspace: str | None = None, limit: int = 200
) -> list[dict[str, Any]]:
    """Schedules, newest first."""
    sql = "SELECT * FROM rm_schedules"
    params: list[Any] = []
    if workspace is not None:
        sql += " WHERE workspace_id = ?"
        params.append(workspace)
    sql += " ORDER BY position DESC LIMIT ?"
    params.append(limit)
    return [schedule_row(r) for r in store.query(sql, params)]


def get_schedule(store: ReadStore, schedule_id: str) -> dict[str, Any] | None:
    """One schedule, or None."""
    row = store.query_one("SELECT * FROM rm_schedules WHERE id = ?", (schedule_id,))
    return schedule_row(row) if row else None


def due_user_schedule_ids(store: ReadStore, now: datetime) -> list[str]:
    """Unpaused user schedules whose next run has come (materialisation re-checks the log)."""
    rows = store.query(
        "SELECT id FROM rm_schedules WHERE paused = ? AND source = 'user' "
        "AND next_run_at IS NOT NULL AND next_run_at <= ? ORDER BY next_run_at",
        (False, iso(now)),
    )
    return [r["id"] for r in rows]
