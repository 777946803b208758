"""Workspaces read model."""

from __future__ import annotations

from typing import Any

from projections.base import Envelope, Projection, handles
from projections.store import Cursor, ReadStore


class WorkspacesProjection(Projection):
    name = "workspaces"
    tables = {
        "workspaces": [
            "CREATE TABLE IF NOT EXISTS {t} (id TEXT PRIMARY KEY, aggregate_id TEXT UNIQUE, "
            "path TEXT NOT NULL, self_update BOOLEAN NOT NULL, position BIGINT NOT NULL, "
            "created_at TEXT NOT NULL, updated_at TEXT NOT NULL)"
        ],
        # Options added after the first release live beside the row, so a table that
        # release created needs no new column; a workspace without a row has defaults.
        "workspace_options": [
            "CREATE TABLE IF NOT EXISTS {t} (aggregate_id TEXT PRIMARY KEY, "
            "learned_in_self_update BOOLEAN NOT NULL)"
        ],
    }

    @handles("Workspace.Created")
    def registered(self, cur: Cursor, e: Envelope) -> None:
        cur.execute(
            f"INSERT INTO {self.t['workspaces']} (id, aggregate_id, path, self_update, "
            "position, created_at, updated_at) VALUES (?,?,?,?,?,?,?)",
            (
                e.data["slug"],
                e.key,
                e.data["path"],
                bool(e.data["self_update"]),
                e.position,
                e.at,
                e.at,
            ),
        )

    @handles("Workspace.SelfUpdateChanged")
    def self_update_changed(self, cur: Cursor, e: Envelope) -> None:
        cur.execute(
            f"UPDATE {self.t['workspaces']} SET self_update = ?, updated_at = ? "
            "WHERE aggregate_id = ?",
            (bool(e.data["self_update"]), e.at, e.key),
        )

    @handles("Workspace.LearnedInSelfUpdateChanged")
    def learned_in_self_update_changed(self, cur: Cursor, e: Envelope) -> None:
        enabled = bool(e.data["learned_in_self_update"])
        cur.execute(f"DELETE FROM {self.t['workspace_options']} WHERE aggregate_id = ?", (e.key,))
        cur.execute(
            f"INSERT INTO {self.t['workspace_options']} (aggregate_id, learned_in_self_update) "
            "VALUES (?, ?)",
            (e.key, enabled),
        )
        cur.execute(
            f"UPDATE {self.t['workspaces']} SET updated_at = ? WHERE aggregate_id = ?",
            (e.at, e.key),
        )


_SELECT = (
    "SELECT w.*, COALESCE(o.learned_in_self_update, FALSE) AS learned_in_self_update "
    "FROM rm_workspaces w LEFT JOIN rm_workspace_options o ON o.aggregate_id = w.aggregate_id"
)


def _row(r: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": r["id"],
        "path": r["path"],
        "selfUpdate": bool(r["self_update"]),
        "learnedInSelfUpdate": bool(r["learned_in_self_update"]),
        "createdAt": r["created_at"],
        "updatedAt": r["updated_at"],
    }


def list_workspaces(store: ReadStore, limit: int) -> list[dict[str, Any]]:
    """Workspaces, newest first."""
    rows = store.query(f"{_SELECT} ORDER BY w.position DESC LIMIT ?", (limit,))
    return [_row(r) for r in rows]


def get_workspace(store: ReadStore, slug: str) -> dict[str, Any] | None:
    """One workspace row, or None."""
    row = store.query_one(f"{_SELECT} WHERE w.id = ?", (slug,))
    return _row(row) if row else None
