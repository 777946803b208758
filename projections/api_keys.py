"""Credentials read model: what every process authenticates against, and `keys list`.

Rows hold the secret's SHA-256, never the secret. `position` is the log position of the
row's latest event, so a process can follow changes (a revocation) with one indexed
query. When a key was last used is operational state, not a fact of the log: it lives
in `api_key_usage`, outside the projections, written by the processes that saw it used.
"""

from __future__ import annotations

import json
from typing import Any

from projections.base import Envelope, Projection, handles, iso
from projections.store import Cursor, ReadStore

USAGE_DDL = (
    "CREATE TABLE IF NOT EXISTS api_key_usage (label TEXT PRIMARY KEY, last_used_at TEXT NOT NULL)"
)


class ApiKeysProjection(Projection):
    name = "api_keys"
    tables = {
        "api_keys": [
            "CREATE TABLE IF NOT EXISTS {t} (label TEXT PRIMARY KEY, aggregate_id TEXT UNIQUE, "
            "role TEXT NOT NULL, "
            "secret_sha256 TEXT NOT NULL, binding TEXT NOT NULL, expires_at TEXT, "
            "issued_by TEXT NOT NULL, revoked_at TEXT, revoked_by TEXT, reason TEXT, "
            "position BIGINT NOT NULL, created_at TEXT NOT NULL)",
        ]
    }
    # Every process follows the table by position (see key_rows_since).
    deferred_indexes = {"api_keys": ["CREATE INDEX IF NOT EXISTS {t}_position ON {t} (position)"]}

    @handles("ApiKey.Issued")
    def issued(self, cur: Cursor, e: Envelope) -> None:
        d = e.data
        cur.execute(
            f"INSERT INTO {self.t['api_keys']} (label, aggregate_id, role, secret_sha256, "
            "binding, expires_at, issued_by, position, created_at) VALUES (?,?,?,?,?,?,?,?,?)",
            (
                d["label"],
                e.key,
                d["role"],
                d["secret_sha256"],
                json.dumps(d["binding"], sort_keys=True),
                iso(d["expires_at"]),
                d["actor"],
                e.position,
                e.at,
            ),
        )

    @handles("ApiKey.Revoked")
    def revoked(self, cur: Cursor, e: Envelope) -> None:
        cur.execute(
            f"UPDATE {self.t['api_keys']} SET revoked_at = ?, revoked_by = ?, reason = ?, "
            "position = ? WHERE aggregate_id = ?",
            (e.at, e.data["actor"], e.data["reason"], e.position, e.key),
        )


def key_rows_since(store: ReadStore, position: int) -> list[dict[str, Any]]:
    """Credential rows changed after a log position, in log order."""
    return store.query(
        "SELECT * FROM rm_api_keys WHERE position > ? ORDER BY position", (position,)
    )


def list_keys(store: ReadStore, limit: int) -> list[dict[str, Any]]:
    """Credentials newest first, with when each was last used; never the digest."""
    rows = store.query(
        "SELECT k.*, u.last_used_at FROM rm_api_keys k "
        "LEFT JOIN api_key_usage u ON u.label = k.label ORDER BY k.created_at DESC LIMIT ?",
        (limit,),
    )
    return [key_row(r) for r in rows]


def get_key(store: ReadStore, label: str) -> dict[str, Any] | None:
    row = store.query_one(
        "SELECT k.*, u.last_used_at FROM rm_api_keys k "
        "LEFT JOIN api_key_usage u ON u.label = k.label WHERE k.label = ?",
        (label,),
    )
    return key_row(row) if row else None


def key_label_with_id(store: ReadStore, key_id: str) -> str | None:
    """The label of the credential whose aggregate id this is (as the log names it)."""
    row = store.query_one("SELECT label FROM rm_api_keys WHERE aggregate_id = ?", (key_id,))
    return str(row["label"]) if row else None


def key_row(r: dict[str, Any]) -> dict[str, Any]:
    binding = json.loads(r["binding"])
    return {
        "label": r["label"],
        "role": r["role"],
        "sessionId": binding.get("session_id"),
        "workspaceId": binding.get("workspace_id"),
        "taskId": binding.get("task_id"),
        "createdAt": r["created_at"],
        "issuedBy": r["issued_by"],
        "expiresAt": r["expires_at"],
        "lastUsedAt": r.get("last_used_at"),
        "revokedAt": r["revoked_at"],
        "revokedBy": r["revoked_by"],
        "reason": r["reason"],
    }


def record_usage(store: ReadStore, used: dict[str, str]) -> None:
    """Note when keys were last used (the later time wins across processes)."""
    with store.transaction() as cur:
        for label, at in sorted(used.items()):
            cur.execute(
                "INSERT INTO api_key_usage (label, last_used_at) VALUES (?,?) "
                "ON CONFLICT (label) DO UPDATE SET last_used_at = excluded.last_used_at "
                "WHERE excluded.last_used_at > api_key_usage.last_used_at",
                (label, at),
            )
