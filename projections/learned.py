"""Learned targets and revisions read models: effective content, the append-only revision
list, and each target's history (revisions, user edits, hand-backs)."""

from __future__ import annotations

import json
from typing import Any

from projections.base import Envelope, ListenedProjection, handles
from projections.store import Cursor, ReadStore


class LearnedProjection(ListenedProjection):
    name = "learned"
    # The live instance's listener: this process's delivery snapshot (services/learned_context.py).
    tables = {
        "learned_targets": [
            "CREATE TABLE IF NOT EXISTS {t} (id TEXT PRIMARY KEY, kind TEXT NOT NULL, "
            "agent_id TEXT NOT NULL, key TEXT NOT NULL, content TEXT, content_digest TEXT, "
            "evolution_managed BOOLEAN NOT NULL, revision_count INTEGER NOT NULL, "
            "latest_revision_id TEXT, position BIGINT NOT NULL, created_at TEXT NOT NULL, "
            "updated_at TEXT NOT NULL, workspace_id TEXT, promoted_revision_id TEXT, "
            "promoted_digest TEXT, promoted_everywhere BOOLEAN, promoted_workspaces TEXT, "
            "promoted_by TEXT, promoted_at TEXT)",
            "CREATE INDEX IF NOT EXISTS {t}_agent ON {t} (agent_id, kind)",
        ],
        "learned_revisions": [
            "CREATE TABLE IF NOT EXISTS {t} (id TEXT PRIMARY KEY, target_id TEXT NOT NULL, "
            "target_kind TEXT NOT NULL, agent_id TEXT NOT NULL, key TEXT NOT NULL, "
            "signal_id TEXT, content TEXT, previous_content_digest TEXT, content_digest TEXT, "
            "reverts_revision_id TEXT, reverted_by_revision_id TEXT, actor TEXT NOT NULL, "
            "position BIGINT NOT NULL, at TEXT NOT NULL, workspace_id TEXT)",
            "CREATE INDEX IF NOT EXISTS {t}_pos ON {t} (position)",
            "CREATE INDEX IF NOT EXISTS {t}_target ON {t} (target_id, position)",
        ],
        "learned_history": [
            "CREATE TABLE IF NOT EXISTS {t} (position BIGINT PRIMARY KEY, target_id TEXT NOT NULL, "
            "change TEXT NOT NULL, revision_id TEXT, signal_id TEXT, reverts_revision_id TEXT, "
            "content_digest TEXT, previous_content_digest TEXT, actor TEXT NOT NULL, "
            "at TEXT NOT NULL, scope TEXT)",
            "CREATE INDEX IF NOT EXISTS {t}_target ON {t} (target_id, position)",
        ],
    }

    @handles("LearnedTarget.Created")
    def created(self, cur: Cursor, e: Envelope) -> None:
        d = e.data
        cur.execute(
            f"INSERT INTO {self.t['learned_targets']} (id, kind, agent_id, key, "
            "evolution_managed, revision_count, position, created_at, updated_at, workspace_id) "
            "VALUES (?,?,?,?,?,0,?,?,?,?)",
            (
                e.key,
                d["kind"],
                d["agent_id"],
                d["key"],
                True,
                e.position,
                e.at,
                e.at,
                d.get("workspace_id"),
            ),
        )

    @handles("LearnedTarget.Revised")
    def revised(self, cur: Cursor, e: Envelope) -> None:
        d = e.data
        target = e.key
        self.changed()
        cur.execute(
            f"SELECT kind, agent_id, key, workspace_id FROM {self.t['learned_targets']} "
            "WHERE id = ?",
            (target,),
        )
        row = cur.fetchone()
        assert row is not None, "a revision always follows its target's creation"
        cur.execute(
            f"INSERT INTO {self.t['learned_revisions']} (id, target_id, target_kind, agent_id, "
            "key, signal_id, content, previous_content_digest, content_digest, "
            "reverts_revision_id, actor, position, at, workspace_id) "
            "VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
            (
                d["revision_id"],
                target,
                row["kind"],
                row["agent_id"],
                row["key"],
                d["signal_id"],
                d["content"],
                d["previous_content_digest"],
                d["content_digest"],
                d["reverts_revision_id"],
                d["actor"],
                e.position,
                e.at,
                row["workspace_id"],
            ),
        )
        if d["reverts_revision_id"] is not None:
            cur.execute(
                f"UPDATE {self.t['learned_revisions']} SET reverted_by_revision_id = ? "
                "WHERE id = ?",
                (d["revision_id"], d["reverts_revision_id"]),
            )
        cur.execute(
            f"UPDATE {self.t['learned_targets']} SET content = ?, content_digest = ?, "
            "revision_count = revision_count + 1, latest_revision_id = ?, updated_at = ? "
            "WHERE id = ?",
            (d["content"], d["content_digest"], d["revision_id"], e.at, target),
        )
        change = "revert" if d["reverts_revision_id"] else "revision"
        self._history(cur, e, change, d["revision_id"], d["signal_id"], d["reverts_revision_id"])

    @handles("LearnedTarget.UserEdited")
    def user_edited(self, cur: Cursor, e: Envelope) -> None:
        d = e.data
        self.changed()
        cur.execute(
            f"UPDATE {self.t['learned_targets']} SET content = ?, content_digest = ?, "
            "evolution_managed = ?, updated_at = ? WHERE id = ?",
            (d["content"], d["content_digest"], False, e.at, e.key),
        )
        self._history(cur, e, "user_edit", None, None, None)

    @handles("LearnedTarget.HandedBack")
    def handed_back(self, cur: Cursor, e: Envelope) -> None:
        self.changed()
        cur.execute(
            f"UPDATE {self.t['learned_targets']} SET evolution_managed = ?, updated_at = ? "
            "WHERE id = ?",
            (True, e.at, e.key),
        )
        self._history(cur, e, "hand_back", None, None, None)

    @handles("LearnedTarget.Promoted")
    def promoted(self, cur: Cursor, e: Envelope) -> None:
        d = e.data
        self.changed()
        everywhere = bool(d["everywhere"])
        workspaces = list(d["workspace_ids"])
        promoted = everywhere or bool(workspaces)
        cur.execute(
            f"UPDATE {self.t['learned_targets']} SET promoted_revision_id = ?, "
            "promoted_digest = ?, promoted_everywhere = ?, promoted_workspaces = ?, "
            "promoted_by = ?, promoted_at = ?, updated_at = ? WHERE id = ?",
            (
                d["revision_id"] if promoted else None,
                d["content_digest"] if promoted else None,
                everywhere if promoted else None,
                json.dumps(workspaces) if promoted else None,
                d["actor"],
                e.at,
                e.at,
                e.key,
            ),
        )
        scope = json.dumps({"everywhere": everywhere, "workspaceIds": workspaces})
        self._history(cur, e, "promote", d["revision_id"], None, None, scope)

    def _history(
        self,
        cur: Cursor,
        e: Envelope,
        change: str,
        revision_id: str | None,
        signal_id: str | None,
        reverts: str | None,
        scope: str | None = None,
    ) -> None:
        d = e.data
        cur.execute(
            f"INSERT INTO {self.t['learned_history']} (position, target_id, change, revision_id, "
            "signal_id, reverts_revision_id, content_digest, previous_content_digest, actor, at, "
            "scope) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
            (
                e.position,
                e.key,
                change,
                revision_id,
                signal_id,
                reverts,
                d.get("content_digest"),
                d.get("previous_content_digest"),
                d["actor"],
                e.at,
                scope,
            ),
        )


def revision_row(r: dict[str, Any]) -> dict[str, Any]:
    """Wire shape of a revision."""
    return {
        "id": r["id"],
        "targetKind": r["target_kind"],
        "agentId": r["agent_id"],
        "key": r["key"],
        "signalId": r["signal_id"],
        "content": r["content"],
        "previousContentDigest": r["previous_content_digest"],
        "contentDigest": r["content_digest"],
        "revertsRevisionId": r["reverts_revision_id"],
        "revertedByRevisionId": r["reverted_by_revision_id"],
        "actor": r["actor"],
        "at": r["at"],
        "workspaceId": r["workspace_id"],
    }


def promotion_of(r: dict[str, Any]) -> dict[str, Any] | None:
    """The promotion in force (an operator's, by revision), or None."""
    if r["promoted_revision_id"] is None:
        return None
    return {
        "revisionId": r["promoted_revision_id"],
        "contentDigest": r["promoted_digest"],
        "everywhere": bool(r["promoted_everywhere"]),
        "workspaceIds": json.loads(r["promoted_workspaces"] or "[]"),
        # Only while the target holds the promoted content does it reach other workspaces.
        "inForce": r["promoted_digest"] == r["content_digest"],
        "actor": r["promoted_by"],
        "at": r["promoted_at"],
    }


def target_row(r: dict[str, Any]) -> dict[str, Any]:
    """Wire shape of a target (its effective content)."""
    return {
        "id": r["id"],
        "kind": r["kind"],
        "agentId": r["agent_id"],
        "key": r["key"],
        "content": r["content"],
        "contentDigest": r["content_digest"],
        "evolutionManaged": bool(r["evolution_managed"]),
        "revisionCount": int(r["revision_count"]),
        "latestRevisionId": r["latest_revision_id"],
        "createdAt": r["created_at"],
        "updatedAt": r["updated_at"],
        "workspaceId": r["workspace_id"],
        "promotion": promotion_of(r),
    }


def _filtered(table: str, filters: dict[str, Any], order: str, limit: int) -> tuple[str, list[Any]]:
    where = [f"{column} = ?" for column, value in filters.items() if value is not None]
    params: list[Any] = [value for value in filters.values() if value is not None]
    sql = f"SELECT * FROM {table}"
    if where:
        sql += " WHERE " + " AND ".join(where)
    return f"{sql} ORDER BY {order} LIMIT ?", [*params, limit]


def list_revisions(
    store: ReadStore, *, target_kind: str | None, agent_id: str | None, limit: int = 200
) -> list[dict[str, Any]]:
    """Revisions, newest first."""
    sql, params = _filtered(
        "rm_learned_revisions",
        {"target_kind": target_kind, "agent_id": agent_id},
        "position DESC",
        limit,
    )
    return [revision_row(r) for r in store.query(sql, params)]


def get_revision(store: ReadStore, revision_id: str) -> dict[str, Any] | None:
    """One revision, or None."""
    row = store.query_one("SELECT * FROM rm_learned_revisions WHERE id = ?", (revision_id,))
    return revision_row(row) if row else None


def revision_target_id(store: ReadStore, revision_id: str) -> str | None:
    """The target a revision belongs to (an immutable fact, safe to look up here)."""
    row = store.query_one("SELECT target_id FROM rm_learned_revisions WHERE id = ?", (revision_id,))
    return str(row["target_id"]) if row else None


def list_targets(
    store: ReadStore,
    *,
    kind: str | None,
    agent_id: str | None,
    evolution_managed: bool | None = None,
    workspace_id: str | None = None,
    limit: int = 200,
) -> list[dict[str, Any]]:
    """Targets, most recently changed first (of one workspace, when `workspace_id`)."""
    filters = {
        "kind": kind,
        "agent_id": agent_id,
        "evolution_managed": evolution_managed,
        "workspace_id": workspace_id,
    }
    sql, params = _filtered("rm_learned_targets", filters, "updated_at DESC, id", limit)
    return [target_row(r) for r in store.query(sql, params)]


def target_by_id(store: ReadStore, target_id: str) -> dict[str, Any] | None:
    """A target's wire shape (without history), or None."""
    row = store.query_one("SELECT * FROM rm_learned_targets WHERE id = ?", (target_id,))
    return target_row(row) if row else None


def get_target(
    store: ReadStore, kind: str, agent_id: str, key: str, workspace_id: str | None = None
) -> dict[str, Any] | None:
    """A target (of every workspace, or of `workspace_id`) with its history (oldest
    first), or None."""
    scope = "workspace_id IS NULL" if workspace_id is None else "workspace_id = ?"
    with store.transaction(write=False) as cur:
        cur.execute(
            "SELECT * FROM rm_learned_targets WHERE kind = ? AND agent_id = ? AND key = ? "
            f"AND {scope}",
            (kind, agent_id, key) if workspace_id is None else (kind, agent_id, key, workspace_id),
        )
        row = cur.fetchone()
        if row is None:
            return None
        cur.execute(
            "SELECT * FROM rm_learned_history WHERE target_id = ? ORDER BY position",
            (row["id"],),
        )
        history = cur.fetchall()
    result = target_row(row)
    result["history"] = [
        {
            "change": h["change"],
            "revisionId": h["revision_id"],
            "signalId": h["signal_id"],
            "revertsRevisionId": h["reverts_revision_id"],
            "contentDigest": h["content_digest"],
            "previousContentDigest": h["previous_content_digest"],
            "actor": h["actor"],
            "at": h["at"],
            "position": int(h["position"]),
            "scope": json.loads(h["scope"]) if h["scope"] else None,
        }
        for h in history
    ]
    return result
