"""Signals read model: bounded, redacted evidence and where each signal is in its life."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from projections.base import Envelope, Projection, handles, iso
from projections.store import Cursor, ReadStore


class SignalsProjection(Projection):
    name = "signals"
    tables = {
        "signals": [
            "CREATE TABLE IF NOT EXISTS {t} (id TEXT PRIMARY KEY, agent_id TEXT NOT NULL, "
            "trace_id TEXT NOT NULL, kind TEXT NOT NULL, goal TEXT NOT NULL, outcome TEXT, "
            "failure TEXT, failure_class TEXT, session_id TEXT, turn_id TEXT, "
            "received TEXT NOT NULL, status TEXT NOT NULL, "
            "attempts INTEGER NOT NULL, next_attempt_at TEXT, claimed_by TEXT, "
            "claim_expires_at TEXT, last_error TEXT, strategy TEXT, target_id TEXT, "
            "revision_id TEXT, reason TEXT, position BIGINT NOT NULL, created_at TEXT NOT NULL, "
            "updated_at TEXT NOT NULL, workspace_id TEXT, credential TEXT, actor TEXT)",
            "CREATE INDEX IF NOT EXISTS {t}_pos ON {t} (position)",
            "CREATE INDEX IF NOT EXISTS {t}_status ON {t} (status, position)",
        ]
    }

    @handles("Signal.Created")
    def created(self, cur: Cursor, e: Envelope) -> None:
        d = e.data
        cur.execute(
            f"INSERT INTO {self.t['signals']} (id, agent_id, trace_id, kind, goal, outcome, "
            "failure, failure_class, session_id, turn_id, received, status, attempts, position, "
            "created_at, updated_at, workspace_id, credential, actor) "
            "VALUES (?,?,?,?,?,?,?,?,?,?,?,'pending',0,?,?,?,?,?,?)",
            (
                e.key,
                d["agent_id"],
                d["trace_id"],
                d["kind"],
                d["goal"],
                d["outcome"],
                d["failure"],
                d["failure_class"],
                d["session_id"],
                d.get("turn_id"),
                json.dumps(sorted(d.get("received") or ())),
                e.position,
                e.at,
                e.at,
                d.get("workspace_id"),
                d.get("credential"),
                d["actor"],
            ),
        )

    @handles("Signal.Claimed")
    def claimed(self, cur: Cursor, e: Envelope) -> None:
        d = e.data
        self._update(
            cur,
            e,
            status="claimed",
            attempts=d["attempt"],
            claimed_by=d["worker"],
            claim_expires_at=iso(d["expires_at"]),
            next_attempt_at=None,
        )

    @handles("Signal.Completed")
    def completed(self, cur: Cursor, e: Envelope) -> None:
        d = e.data
        self._update(
            cur,
            e,
            status="completed",
            strategy=d["strategy"],
            target_id=d["target_id"],
            revision_id=d["revision_id"],
            last_error=None,
            **_unclaimed(),
        )

    @handles("Signal.RetryScheduled")
    def retry_scheduled(self, cur: Cursor, e: Envelope) -> None:
        d = e.data
        self._update(
            cur,
            e,
            status="pending",
            last_error=d["error"],
            next_attempt_at=iso(d["next_attempt_at"]),
            **_unclaimed(),
        )

    @handles("Signal.DeadLettered")
    def dead_lettered(self, cur: Cursor, e: Envelope) -> None:
        d = e.data
        self._update(
            cur,
            e,
            status="dead-letter",
            last_error=d["error"],
            next_attempt_at=None,
            **_unclaimed(),
        )

    @handles("Signal.Ignored")
    def ignored(self, cur: Cursor, e: Envelope) -> None:
        self._update(
            cur, e, status="ignored", reason=e.data["reason"], next_attempt_at=None, **_unclaimed()
        )

    @handles("Signal.Retried")
    def retried(self, cur: Cursor, e: Envelope) -> None:
        self._update(cur, e, status="pending", attempts=0, next_attempt_at=None, last_error=None)

    def _update(self, cur: Cursor, e: Envelope, **columns: Any) -> None:
        columns["updated_at"] = e.at
        assignments = ", ".join(f"{c} = ?" for c in columns)
        cur.execute(
            f"UPDATE {self.t['signals']} SET {assignments} WHERE id = ?",
            (*columns.values(), e.key),
        )


def _unclaimed() -> dict[str, Any]:
    return {"claimed_by": None, "claim_expires_at": None}


def signal_row(r: dict[str, Any]) -> dict[str, Any]:
    """Wire shape of a signal."""
    return {
        "id": r["id"],
        "agentId": r["agent_id"],
        "traceId": r["trace_id"],
        "kind": r["kind"],
        "goal": r["goal"],
        "outcome": r["outcome"],
        "failure": r["failure"],
        "failureClass": r["failure_class"],
        "sessionId": r["session_id"],
        "turnId": r["turn_id"],
        "received": json.loads(r["received"]),
        # Where the evidence arose and who reported it (null on signals of releases
        # that did not record them).
        "workspaceId": r["workspace_id"],
        "credential": r["credential"],
        "actor": r["actor"],
        "status": r["status"],
        "attempts": int(r["attempts"]),
        "nextAttemptAt": r["next_attempt_at"],
        "claimedBy": r["claimed_by"],
        "claimExpiresAt": r["claim_expires_at"],
        "lastError": r["last_error"],
        "strategy": r["strategy"],
        "targetId": r["target_id"],
        "revisionId": r["revision_id"],
        "reason": r["reason"],
        "createdAt": r["created_at"],
        "updatedAt": r["updated_at"],
    }


def list_signals(
    store: ReadStore,
    *,
    status: str | None = None,
    agent_id: str | None = None,
    workspace_id: str | None = None,
    limit: int = 200,
) -> list[dict[str, Any]]:
    """Recent signals, newest first."""
    sql = "SELECT * FROM rm_signals"
    where: list[str] = []
    params: list[Any] = []
    if status is not None:
        where.append("status = ?")
        params.append(status)
    if agent_id is not None:
        where.append("agent_id = ?")
        params.append(agent_id)
    if workspace_id is not None:
        where.append("workspace_id = ?")
        params.append(workspace_id)
    if where:
        sql += " WHERE " + " AND ".join(where)
    sql += " ORDER BY position DESC LIMIT ?"
    params.append(limit)
    return [signal_row(r) for r in store.query(sql, params)]


def get_signal(store: ReadStore, signal_id: str) -> dict[str, Any] | None:
    """One signal, or None."""
    row = store.query_one("SELECT * FROM rm_signals WHERE id = ?", (signal_id,))
    return signal_row(row) if row else None


def due_signal_ids(store: ReadStore, now: datetime, limit: int) -> list[str]:
    """Pending signals past their backoff and expired claims, oldest first (claims re-check)."""
    at = iso(now)
    rows = store.query(
        "SELECT id FROM rm_signals WHERE (status = 'pending' AND (next_attempt_at IS NULL "
        "OR next_attempt_at <= ?)) OR (status = 'claimed' AND claim_expires_at <= ?) "
        "ORDER BY position LIMIT ?",
        (at, at, limit),
    )
    return [r["id"] for r in rows]
