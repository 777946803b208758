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
        ]
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


def _row(r: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": r["id"],
        "path": r["path"],
        "selfUpdate": bool(r["self_update"]),
        "createdAt": r["created_at"],
        "updatedAt": r["updated_at"],
    }


def list_workspaces(store: ReadStore, limit: int) -> list[dict[str, Any]]:
    """Workspaces, newest first."""
    rows = store.query("SELECT * FROM rm_workspaces ORDER BY position DESC LIMIT ?", (limit,))
    return [_row(r) for r in rows]


def get_workspace(store: ReadStore, slug: str) -> dict[str, Any] | None:
    """One workspace row, or None."""
    row = store.query_one("SELECT * FROM rm_workspaces WHERE id = ?", (slug,))
    return _row(row) if row else None
