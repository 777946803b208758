"""Autonomy settings read model: the policy switches and the self-update gate."""

from __future__ import annotations

from typing import Any

from domain.autonomy_settings import POLICIES
from projections.base import Envelope, Projection, handles
from projections.store import Cursor, ReadStore

_WIRE = {
    "evolution": "evolution",
    "skill_creation": "skillCreation",
    "fact_retention": "factRetention",
    "self_update": "selfUpdate",
}


class AutonomySettingsProjection(Projection):
    name = "autonomy_settings"
    tables = {
        "autonomy_settings": [
            "CREATE TABLE IF NOT EXISTS {t} (id TEXT PRIMARY KEY, evolution BOOLEAN NOT NULL, "
            "skill_creation BOOLEAN NOT NULL, fact_retention BOOLEAN NOT NULL, "
            "self_update BOOLEAN NOT NULL, updated_by TEXT NOT NULL, position BIGINT NOT NULL, "
            "created_at TEXT NOT NULL, updated_at TEXT NOT NULL)"
        ],
        "autonomy_gate": [
            "CREATE TABLE IF NOT EXISTS {t} (id TEXT PRIMARY KEY, enabled BOOLEAN NOT NULL, "
            "task_id TEXT, workspace_id TEXT, acquired_at TEXT, cycles INTEGER NOT NULL, "
            "position BIGINT NOT NULL, updated_at TEXT NOT NULL)"
        ],
    }

    @handles("AutonomySettings.Created")
    def created(self, cur: Cursor, e: Envelope) -> None:
        cur.execute(
            f"INSERT INTO {self.t['autonomy_settings']} (id, evolution, skill_creation, "
            "fact_retention, self_update, updated_by, position, created_at, updated_at) "
            "VALUES (?,?,?,?,?,?,?,?,?)",
            (
                e.key,
                False,
                False,
                False,
                False,
                e.data["actor"],
                e.position,
                e.at,
                e.at,
            ),
        )

    @handles("AutonomySettings.Changed")
    def changed(self, cur: Cursor, e: Envelope) -> None:
        changes = {k: bool(v) for k, v in e.data["changes"].items() if k in POLICIES}
        columns = {
            **changes,
            "updated_by": e.data["actor"],
            "position": e.position,
            "updated_at": e.at,
        }
        assignments = ", ".join(f"{c} = ?" for c in columns)
        cur.execute(
            f"UPDATE {self.t['autonomy_settings']} SET {assignments} WHERE id = ?",
            (*columns.values(), e.key),
        )

    @handles("AutonomyGate.Created")
    def gate_created(self, cur: Cursor, e: Envelope) -> None:
        cur.execute(
            f"INSERT INTO {self.t['autonomy_gate']} (id, enabled, cycles, position, updated_at) "
            "VALUES (?,?,0,?,?)",
            (e.key, False, e.position, e.at),
        )

    @handles("AutonomyGate.PolicyChanged")
    def gate_policy(self, cur: Cursor, e: Envelope) -> None:
        self._gate(cur, e, "enabled = ?", (bool(e.data["enabled"]),))

    @handles("AutonomyGate.Acquired")
    def gate_acquired(self, cur: Cursor, e: Envelope) -> None:
        self._gate(
            cur,
            e,
            "task_id = ?, workspace_id = ?, acquired_at = ?, cycles = cycles + 1",
            (e.data["task_id"], e.data["workspace"], e.at),
        )

    @handles("AutonomyGate.Released")
    def gate_released(self, cur: Cursor, e: Envelope) -> None:
        self._gate(cur, e, "task_id = NULL, workspace_id = NULL, acquired_at = NULL", ())

    def _gate(self, cur: Cursor, e: Envelope, assignments: str, values: tuple[Any, ...]) -> None:
        cur.execute(
            f"UPDATE {self.t['autonomy_gate']} SET {assignments}, position = ?, updated_at = ? "
            "WHERE id = ?",
            (*values, e.position, e.at, e.key),
        )


def autonomy_settings(store: ReadStore) -> dict[str, Any]:
    """The policy switches (all off until first changed) and the gate's current task."""
    row = store.query_one("SELECT * FROM rm_autonomy_settings")
    gate = store.query_one("SELECT * FROM rm_autonomy_gate")
    result: dict[str, Any] = {
        wire: bool(row[name]) if row else False for name, wire in _WIRE.items()
    }
    result["updatedBy"] = row["updated_by"] if row else None
    result["updatedAt"] = row["updated_at"] if row else None
    result["selfUpdateTaskId"] = gate["task_id"] if gate else None
    result["selfUpdateCycles"] = int(gate["cycles"]) if gate else 0
    return result
