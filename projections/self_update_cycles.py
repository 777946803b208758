"""Self-update workflows: each task's phases in order, with their evidence."""

from __future__ import annotations

import json
from typing import Any

from domain.casing import to_camel
from projections.base import Envelope, Projection, handles
from projections.store import Cursor, ReadStore


class SelfUpdateCyclesProjection(Projection):
    name = "self_update_cycles"
    tables = {
        "self_update_cycles": [
            "CREATE TABLE IF NOT EXISTS {t} (id TEXT PRIMARY KEY, task_id TEXT UNIQUE, "
            "workspace_id TEXT NOT NULL, ref TEXT, commit_sha TEXT, discarded_at TEXT, "
            "discarded_by TEXT, position BIGINT NOT NULL, created_at TEXT NOT NULL, "
            "updated_at TEXT NOT NULL)"
        ],
        "self_update_phases": [
            "CREATE TABLE IF NOT EXISTS {t} (cycle_id TEXT NOT NULL, position BIGINT NOT NULL, "
            "attempt INTEGER NOT NULL, phase TEXT NOT NULL, status TEXT NOT NULL, "
            "evidence TEXT NOT NULL, at TEXT NOT NULL, PRIMARY KEY (cycle_id, position))"
        ],
    }

    @handles("SelfUpdateCycle.Created")
    def created(self, cur: Cursor, e: Envelope) -> None:
        cur.execute(
            f"INSERT INTO {self.t['self_update_cycles']} (id, task_id, workspace_id, position, "
            "created_at, updated_at) VALUES (?,?,?,?,?,?)",
            (e.key, str(e.data["task_id"]), e.data["workspace"], e.position, e.at, e.at),
        )

    @handles("SelfUpdateCycle.PhaseRecorded")
    def phase(self, cur: Cursor, e: Envelope) -> None:
        d = e.data
        cur.execute(
            f"INSERT INTO {self.t['self_update_phases']} (cycle_id, position, attempt, phase, "
            "status, evidence, at) VALUES (?,?,?,?,?,?,?)",
            (
                e.key,
                e.position,
                d["attempt"],
                d["phase"],
                d["status"],
                json.dumps(d["evidence"], sort_keys=True),
                e.at,
            ),
        )
        if d["phase"] == "commit" and d["status"] == "ok":
            cur.execute(
                f"UPDATE {self.t['self_update_cycles']} SET ref = ?, commit_sha = ?, "
                "discarded_at = NULL, discarded_by = NULL, position = ?, updated_at = ? "
                "WHERE id = ?",
                (d["evidence"]["ref"], d["evidence"]["commit"], e.position, e.at, e.key),
            )

    @handles("SelfUpdateCycle.Discarded")
    def discarded(self, cur: Cursor, e: Envelope) -> None:
        cur.execute(
            f"UPDATE {self.t['self_update_cycles']} SET discarded_at = ?, discarded_by = ?, "
            "position = ?, updated_at = ? WHERE id = ?",
            (e.at, e.data["actor"], e.position, e.at, e.key),
        )


def task_workflow(store: ReadStore, task_id: str) -> dict[str, Any] | None:
    """A self-update task's phases, oldest first; None for a task without a cycle."""
    cycle = store.query_one("SELECT * FROM rm_self_update_cycles WHERE task_id = ?", (task_id,))
    if cycle is None:
        return None
    phases = store.query(
        "SELECT * FROM rm_self_update_phases WHERE cycle_id = ? ORDER BY position", (cycle["id"],)
    )
    return {
        "taskId": task_id,
        "workspaceId": cycle["workspace_id"],
        "ref": cycle["ref"],
        "commit": cycle["commit_sha"],
        "discardedAt": cycle["discarded_at"],
        "discardedBy": cycle["discarded_by"],
        "phases": [
            {
                "attempt": p["attempt"],
                "phase": p["phase"],
                "status": p["status"],
                "evidence": _camel_keys(json.loads(p["evidence"])),
                "at": p["at"],
            }
            for p in phases
        ],
    }


def has_workflow(store: ReadStore, task_id: str) -> bool:
    """Whether GET /api/tasks/{id}/workflow answers for the task (a cycle has begun)."""
    found = store.query_one(
        "SELECT 1 AS x FROM rm_self_update_cycles WHERE task_id = ?", (task_id,)
    )
    return found is not None


def cycle_outcome_counts(store: ReadStore) -> dict[str, int]:
    """Ended cycle attempts by outcome: the status of each attempt's last phase."""
    rows = store.query(
        "SELECT p.phase, p.status FROM rm_self_update_phases p JOIN (SELECT cycle_id, attempt, "
        "MAX(position) AS last FROM rm_self_update_phases GROUP BY cycle_id, attempt) e "
        "ON e.cycle_id = p.cycle_id AND e.last = p.position"
    )
    counts: dict[str, int] = {}
    for r in rows:
        if r["phase"] == "commit" and r["status"] == "ok":
            outcome = "imported"
        elif r["status"] == "ok":
            continue  # still running
        else:
            outcome = str(r["status"])
        counts[outcome] = counts.get(outcome, 0) + 1
    return counts


def _camel_keys(evidence: dict[str, Any]) -> dict[str, Any]:
    """Evidence as the API shows it: the log keeps snake_case, the wire camelCase."""
    return {to_camel(k): v for k, v in evidence.items()}
