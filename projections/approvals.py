"""Approvals read model: pending and settled requests, for operators and for the hook path.

The hook path reads two things here: an "allow for the session" decision (later calls of
that tool in the session pass without asking), and a request for the same call still
pending or just settled (a permission dialog after its PreToolUse, or a retry), so one
call is never put to an operator twice.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from domain.approval import ABANDONED, ALLOW, DECIDED, PENDING
from projections.base import Envelope, Projection, handles, iso
from projections.store import Cursor, ReadStore


class ApprovalsProjection(Projection):
    name = "approvals"
    tables = {
        "approvals": [
            "CREATE TABLE IF NOT EXISTS {t} (id TEXT PRIMARY KEY, dispatch_id TEXT NOT NULL, "
            "session_id TEXT NOT NULL, workspace_id TEXT NOT NULL, event_name TEXT NOT NULL, "
            "turn_id TEXT, agent TEXT, tool_name TEXT, tool_call_id TEXT, input_summary TEXT, "
            "rule_id TEXT, handler_id TEXT, request_reason TEXT, status TEXT NOT NULL, "
            "verdict TEXT, actor TEXT, reason TEXT, for_session BOOLEAN NOT NULL, "
            "requested_at TEXT NOT NULL, deadline TEXT NOT NULL, on_timeout TEXT NOT NULL, "
            "settled_at TEXT, position BIGINT NOT NULL)",
            "CREATE INDEX IF NOT EXISTS {t}_session_tool ON {t} (session_id, tool_name)",
        ]
    }
    deferred_indexes = {
        "approvals": ["CREATE INDEX IF NOT EXISTS {t}_status ON {t} (status, position)"]
    }

    @handles("Approval.Requested")
    def requested(self, cur: Cursor, e: Envelope) -> None:
        d = e.data
        cur.execute(
            f"INSERT INTO {self.t['approvals']} (id, dispatch_id, session_id, workspace_id, "
            "event_name, turn_id, agent, tool_name, tool_call_id, input_summary, rule_id, "
            "handler_id, request_reason, status, for_session, requested_at, deadline, "
            "on_timeout, position) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
            (
                e.key,
                str(d["dispatch_id"]),
                str(d["session_id"]),
                d["workspace_id"],
                d["event_name"],
                d["turn_id"],
                d["agent"],
                d["tool_name"],
                d["tool_call_id"],
                d["input_summary"],
                d["rule_id"],
                d["handler_id"],
                d["reason"],
                PENDING,
                False,
                iso(d["requested_at"]),
                iso(d["deadline"]),
                d["on_timeout"],
                e.position,
            ),
        )

    @handles("Approval.Decided")
    def decided(self, cur: Cursor, e: Envelope) -> None:
        d = e.data
        cur.execute(
            f"UPDATE {self.t['approvals']} SET status = ?, verdict = ?, actor = ?, reason = ?, "
            "for_session = ?, settled_at = ?, position = ? WHERE id = ?",
            (
                DECIDED,
                d["verdict"],
                d["actor"],
                d["reason"],
                d["for_session"],
                e.at,
                e.position,
                e.key,
            ),
        )

    @handles("Approval.Expired")
    def expired(self, cur: Cursor, e: Envelope) -> None:
        cur.execute(
            f"UPDATE {self.t['approvals']} SET status = 'expired', verdict = ?, actor = 'system', "
            "settled_at = ?, position = ? WHERE id = ?",
            (e.data["verdict"], e.at, e.position, e.key),
        )

    @handles("Approval.Abandoned")
    def abandoned(self, cur: Cursor, e: Envelope) -> None:
        cur.execute(
            f"UPDATE {self.t['approvals']} SET status = ?, actor = 'system', settled_at = ?, "
            "position = ? WHERE id = ?",
            (ABANDONED, e.at, e.position, e.key),
        )


def approval_row(r: dict[str, Any], now: datetime | None = None) -> dict[str, Any]:
    """Wire shape of an approval; `secondsLeft` is derived at read time from the deadline."""
    left = None
    if r["status"] == PENDING:
        now = now or datetime.now(UTC)
        deadline = datetime.strptime(r["deadline"], "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)
        left = max(0.0, round((deadline - now).total_seconds(), 1))
    return {
        "id": r["id"],
        "status": r["status"],
        "sessionId": r["session_id"],
        "workspaceId": r["workspace_id"],
        "event": r["event_name"],
        "turnId": r["turn_id"],
        "agent": r["agent"],
        "toolName": r["tool_name"],
        "toolCallId": r["tool_call_id"],
        "inputSummary": r["input_summary"],
        "ruleId": r["rule_id"],
        "handlerId": r["handler_id"],
        "requestReason": r["request_reason"],
        "decision": r["verdict"],
        "decidedBy": r["actor"],
        "reason": r["reason"],
        "forSession": bool(r["for_session"]),
        "requestedAt": r["requested_at"],
        "deadline": r["deadline"],
        "onTimeout": r["on_timeout"],
        "secondsLeft": left,
        "settledAt": r["settled_at"],
    }


def list_approvals(
    store: ReadStore, *, status: str | None, session_id: str | None, limit: int
) -> list[dict[str, Any]]:
    """Approvals newest first, optionally of one status or one session."""
    sql, params = "SELECT * FROM rm_approvals WHERE 1=1", []
    if status is not None:
        sql += " AND status = ?"
        params.append(status)
    if session_id is not None:
        sql += " AND session_id = ?"
        params.append(session_id)
    sql += " ORDER BY requested_at DESC, id LIMIT ?"
    return [approval_row(r) for r in store.query(sql, (*params, limit))]


def get_approval_row(store: ReadStore, approval_id: str) -> dict[str, Any] | None:
    row = store.query_one("SELECT * FROM rm_approvals WHERE id = ?", (approval_id,))
    return approval_row(row) if row else None


def session_allowance(store: ReadStore, session_id: str, tool_name: str) -> str | None:
    """The approval that allowed this tool for the rest of the session, if one did."""
    row = store.query_one(
        "SELECT id FROM rm_approvals WHERE session_id = ? AND tool_name = ? AND status = ? "
        "AND verdict = ? AND for_session = ? ORDER BY position LIMIT 1",
        (session_id, tool_name, DECIDED, ALLOW, True),
    )
    return str(row["id"]) if row else None


def reusable_approval(
    store: ReadStore,
    session_id: str,
    tool_name: str,
    summary: str | None,
    settled_within_s: float,
    now: datetime | None = None,
) -> str | None:
    """A request for the same call that is pending, or settled a moment ago (an abandoned
    one answered nobody: the same call asks anew)."""
    since = iso((now or datetime.now(UTC)) - timedelta(seconds=settled_within_s))
    same = "input_summary IS NULL" if summary is None else "input_summary = ?"
    row = store.query_one(
        f"SELECT id FROM rm_approvals WHERE session_id = ? AND tool_name = ? AND {same} "
        "AND (status = ? OR (settled_at >= ? AND status <> ?)) ORDER BY position DESC LIMIT 1",
        (session_id, tool_name, *([] if summary is None else [summary]), PENDING, since, ABANDONED),
    )
    return str(row["id"]) if row else None


def overdue_approvals(store: ReadStore, before: datetime, limit: int = 500) -> list[str]:
    """Pending approvals whose deadline passed before `before`, oldest first."""
    rows = store.query(
        "SELECT id FROM rm_approvals WHERE status = ? AND deadline < ? ORDER BY position LIMIT ?",
        (PENDING, iso(before), limit),
    )
    return [str(r["id"]) for r in rows]
