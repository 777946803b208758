"""Task board read models: narrow list rows, full prompts apart, activity in its own projection.

The list query reads only `rm_tasks`, so the board costs the same whether tasks carry
no activity or thousands of records.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from domain.task_policy import DETAIL_ACTIVITY
from projections.base import Envelope, Projection, handles, iso
from projections.store import Cursor, ReadStore

PROMPT_HEAD = 500
# Activity order across attempts: log position, then place within its event.
_ORD_STRIDE = 1024

TASK_COLUMNS = (
    "id TEXT PRIMARY KEY, workspace_id TEXT NOT NULL, source TEXT NOT NULL, "
    "kind TEXT NOT NULL, status TEXT NOT NULL, prompt TEXT NOT NULL, model TEXT, "
    "schedule_id TEXT, parent_task_id TEXT, remediation_task_id TEXT, "
    "attempt_count INTEGER NOT NULL, max_attempts INTEGER NOT NULL, next_attempt_at TEXT, "
    "last_error_class TEXT, last_error TEXT, outcome TEXT, resolution TEXT, "
    "dead_lettered_at TEXT, session_id TEXT, interrupted BOOLEAN NOT NULL, "
    "position BIGINT NOT NULL, created_at TEXT NOT NULL, updated_at TEXT NOT NULL, "
    "started_at TEXT, finished_at TEXT"
)


class TasksProjection(Projection):
    name = "tasks"
    tables = {
        "tasks": [
            "CREATE TABLE IF NOT EXISTS {t} (" + TASK_COLUMNS + ")",
            "CREATE INDEX IF NOT EXISTS {t}_pos ON {t} (position)",
            "CREATE INDEX IF NOT EXISTS {t}_status ON {t} (status, position)",
            "CREATE INDEX IF NOT EXISTS {t}_ws ON {t} (workspace_id, position)",
        ],
        "task_prompts": [
            "CREATE TABLE IF NOT EXISTS {t} (id TEXT PRIMARY KEY, prompt TEXT NOT NULL)"
        ],
    }

    @handles("Task.Created")
    def created(self, cur: Cursor, e: Envelope) -> None:
        d = e.data
        cur.execute(
            f"INSERT INTO {self.t['tasks']} (id, workspace_id, source, kind, status, prompt, "
            "model, schedule_id, parent_task_id, attempt_count, max_attempts, interrupted, "
            "position, created_at, updated_at) VALUES (?,?,?,?,'queued',?,?,?,?,0,?,?,?,?,?)",
            (
                e.key,
                d["workspace"],
                d["source"],
                d["kind"],
                d["prompt"][:PROMPT_HEAD],
                d["model"],
                d["schedule_id"],
                d["parent_task_id"],
                d["max_attempts"],
                False,
                e.position,
                e.at,
                e.at,
            ),
        )
        cur.execute(
            f"INSERT INTO {self.t['task_prompts']} (id, prompt) VALUES (?, ?)",
            (e.key, d["prompt"]),
        )

    @handles("Task.Claimed")
    def claimed(self, cur: Cursor, e: Envelope) -> None:
        d = e.data
        self._update(
            cur,
            e,
            status="running",
            attempt_count=d["attempt"],
            session_id=d["session_id"],
            next_attempt_at=None,
            interrupted=False,
            started_at=iso(d["at"]),
            finished_at=None,
        )

    @handles("Task.Completed")
    def completed(self, cur: Cursor, e: Envelope) -> None:
        self._update(cur, e, status="completed", outcome=e.data["outcome"], finished_at=_at(e))

    @handles("Task.Failed")
    def failed(self, cur: Cursor, e: Envelope) -> None:
        self._update(cur, e, status="failed", finished_at=_at(e), **_error(e))

    @handles("Task.RetryScheduled")
    def retry_scheduled(self, cur: Cursor, e: Envelope) -> None:
        self._update(
            cur,
            e,
            status="queued",
            next_attempt_at=iso(e.data["next_attempt_at"]),
            **_error(e),
        )

    @handles("Task.DeadLettered")
    def dead_lettered(self, cur: Cursor, e: Envelope) -> None:
        self._update(
            cur, e, status="dead-letter", dead_lettered_at=_at(e), finished_at=_at(e), **_error(e)
        )

    @handles("Task.Requeued")
    def requeued(self, cur: Cursor, e: Envelope) -> None:
        changes: dict[str, Any] = {"status": "queued", "next_attempt_at": None}
        if e.data["error_class"] is not None:
            changes.update(_error(e))
        self._update(cur, e, **changes)

    @handles("Task.RemediationLinked")
    def remediation_linked(self, cur: Cursor, e: Envelope) -> None:
        self._update(cur, e, remediation_task_id=e.data["remediation_task_id"])

    @handles("Task.CancelRequested")
    def cancel_requested(self, cur: Cursor, e: Envelope) -> None:
        self._update(cur, e, status="cancelling")

    @handles("Task.Cancelled")
    def cancelled(self, cur: Cursor, e: Envelope) -> None:
        self._update(
            cur,
            e,
            status="cancelled",
            next_attempt_at=None,
            last_error_class="cancelled",
            last_error=f"Cancelled by {e.data['actor']}.",
            finished_at=_at(e),
        )

    @handles("Task.Interrupted")
    def interrupted(self, cur: Cursor, e: Envelope) -> None:
        self._update(cur, e, interrupted=True)

    @handles("Task.Resolved")
    def resolved(self, cur: Cursor, e: Envelope) -> None:
        self._update(
            cur,
            e,
            status="completed",
            resolution=e.data["summary"],
            last_error_class=None,
            last_error=None,
            next_attempt_at=None,
            dead_lettered_at=None,
            finished_at=_at(e),
        )

    @handles("Task.Deleted")
    def deleted(self, cur: Cursor, e: Envelope) -> None:
        for table in ("tasks", "task_prompts"):
            cur.execute(f"DELETE FROM {self.t[table]} WHERE id = ?", (e.key,))

    def _update(self, cur: Cursor, e: Envelope, **columns: Any) -> None:
        columns["updated_at"] = e.at
        assignments = ", ".join(f"{c} = ?" for c in columns)
        cur.execute(
            f"UPDATE {self.t['tasks']} SET {assignments} WHERE id = ?",
            (*columns.values(), e.key),
        )


class TaskActivityProjection(Projection):
    """The latest activity records per task across attempts (older ones are trimmed)."""

    name = "task_activity"
    tables = {
        "task_activity": [
            "CREATE TABLE IF NOT EXISTS {t} (task_id TEXT NOT NULL, ord BIGINT NOT NULL, "
            "attempt INTEGER NOT NULL, seq INTEGER NOT NULL, record TEXT NOT NULL, "
            "PRIMARY KEY (task_id, ord))"
        ]
    }

    @handles("Transcript.Appended")
    def appended(self, cur: Cursor, e: Envelope) -> None:
        task_id = e.data["task_id"]
        records = e.data["records"][-DETAIL_ACTIVITY:]
        cur.executemany(
            f"INSERT INTO {self.t['task_activity']} (task_id, ord, attempt, seq, record) "
            "VALUES (?,?,?,?,?)",
            [
                (
                    task_id,
                    e.position * _ORD_STRIDE + index,
                    int(r["attempt"]),
                    int(r["seq"]),
                    json.dumps(r, ensure_ascii=False, separators=(",", ":")),
                )
                for index, r in enumerate(records)
            ],
        )
        table = self.t["task_activity"]
        cur.execute(
            f"DELETE FROM {table} WHERE task_id = ? AND ord <= (SELECT ord FROM {table} "
            f"WHERE task_id = ? ORDER BY ord DESC LIMIT 1 OFFSET {DETAIL_ACTIVITY})",
            (task_id, task_id),
        )

    @handles("Task.Deleted")
    def deleted(self, cur: Cursor, e: Envelope) -> None:
        cur.execute(f"DELETE FROM {self.t['task_activity']} WHERE task_id = ?", (e.key,))


def _at(e: Envelope) -> str | None:
    at: datetime = e.data["at"]
    return iso(at)


def _error(e: Envelope) -> dict[str, Any]:
    return {"last_error_class": e.data["error_class"], "last_error": e.data["error"]}


# Queries


def task_row(r: dict[str, Any]) -> dict[str, Any]:
    """Wire shape of a task list row (never with activity)."""
    return {
        "id": r["id"],
        "workspaceId": r["workspace_id"],
        "source": r["source"],
        "kind": r["kind"],
        "status": r["status"],
        "prompt": r["prompt"],
        "model": r["model"],
        "scheduleId": r["schedule_id"],
        "parentTaskId": r["parent_task_id"],
        "remediationTaskId": r["remediation_task_id"],
        "attemptCount": int(r["attempt_count"]),
        "maxAttempts": int(r["max_attempts"]),
        "nextAttemptAt": r["next_attempt_at"],
        "lastErrorClass": r["last_error_class"],
        "lastError": r["last_error"],
        "outcome": r["outcome"],
        "resolution": r["resolution"],
        "deadLetteredAt": r["dead_lettered_at"],
        "sessionId": r["session_id"],
        "interrupted": bool(r["interrupted"]),
        "createdAt": r["created_at"],
        "updatedAt": r["updated_at"],
        "startedAt": r["started_at"],
        "finishedAt": r["finished_at"],
    }


def list_tasks(
    store: ReadStore,
    *,
    status: str | None = None,
    workspace: str | None = None,
    source: str | None = None,
    limit: int = 200,
) -> list[dict[str, Any]]:
    """Task rows, newest first; reads no activity."""
    sql = "SELECT * FROM rm_tasks"
    where: list[str] = []
    params: list[Any] = []
    for column, value in (("status", status), ("workspace_id", workspace), ("source", source)):
        if value is not None:
            where.append(f"{column} = ?")
            params.append(value)
    if where:
        sql += " WHERE " + " AND ".join(where)
    sql += " ORDER BY position DESC LIMIT ?"
    params.append(limit)
    return [task_row(r) for r in store.query(sql, params)]


_ACTIVITY_FIELDS = ("text", "tool", "args", "result", "error")


def activity_record(raw: str) -> dict[str, Any]:
    """Wire shape of one activity record: every field present, absent ones null."""
    r = json.loads(raw)
    return {
        "seq": r["seq"],
        "attempt": r["attempt"],
        "at": r.get("at"),
        "kind": r.get("kind", "text"),
        "agent": r.get("agent"),
        **{k: r.get(k) for k in _ACTIVITY_FIELDS},
    }


def get_task(store: ReadStore, task_id: str) -> dict[str, Any] | None:
    """One task with its full prompt and the latest activity (oldest first), or None."""
    with store.transaction(write=False) as cur:
        cur.execute(
            "SELECT t.*, p.prompt AS full_prompt FROM rm_tasks t "
            "JOIN rm_task_prompts p ON p.id = t.id WHERE t.id = ?",
            (task_id,),
        )
        row = cur.fetchone()
        if row is None:
            return None
        cur.execute(
            "SELECT record FROM rm_task_activity WHERE task_id = ? ORDER BY ord DESC LIMIT ?",
            (task_id, DETAIL_ACTIVITY),
        )
        activity = [activity_record(r["record"]) for r in reversed(cur.fetchall())]
    result = task_row(row)
    result["prompt"] = row["full_prompt"]
    result["activity"] = activity
    return result


def due_task_ids(store: ReadStore, now: datetime, limit: int) -> list[str]:
    """Queued tasks whose backoff has passed, oldest first (claims still check the log)."""
    rows = store.query(
        "SELECT id FROM rm_tasks WHERE status = 'queued' "
        "AND (next_attempt_at IS NULL OR next_attempt_at <= ?) ORDER BY position LIMIT ?",
        (iso(now), limit),
    )
    return [r["id"] for r in rows]


def active_task_ids(store: ReadStore) -> list[str]:
    """Tasks the read model shows running or cancelling (restart recovery candidates)."""
    rows = store.query(
        "SELECT id FROM rm_tasks WHERE status IN ('running', 'cancelling') ORDER BY position"
    )
    return [r["id"] for r in rows]
