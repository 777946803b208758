"""Learned deliveries read model: one row per learned target an answer or a task prompt
carried (its revision and the digest of the content delivered), with where it went.

Rows come from the `learned` field of the events that delivered (SPEC §8: a hook
dispatch, a task attempt's start) and are never changed or removed: they are the record
of what each agent was told, kept when a session is deleted or a revision reverted.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from projections.base import Envelope, Projection, handles
from projections.store import Cursor, ReadStore

_COLUMNS = (
    "position",
    "at",
    "target_id",
    "kind",
    "agent_id",
    "key",
    "revision_id",
    "content_digest",
    "session_id",
    "turn_id",
    "dispatch_id",
    "task_id",
    "attempt",
    "origin_workspace_id",
    "delivered_in",
    "scope",
)


class DeliveriesProjection(Projection):
    name = "deliveries"
    tables = {
        "learned_deliveries": [
            "CREATE TABLE IF NOT EXISTS {t} (position BIGINT NOT NULL, at TEXT NOT NULL, "
            "target_id TEXT NOT NULL, kind TEXT NOT NULL, agent_id TEXT NOT NULL, "
            "key TEXT NOT NULL, revision_id TEXT, content_digest TEXT NOT NULL, "
            "session_id TEXT, turn_id TEXT, dispatch_id TEXT, task_id TEXT, attempt INTEGER, "
            "origin_workspace_id TEXT, delivered_in TEXT, scope TEXT, "
            "PRIMARY KEY (position, target_id))",
            "CREATE INDEX IF NOT EXISTS {t}_revision ON {t} (revision_id, position)",
            "CREATE INDEX IF NOT EXISTS {t}_session ON {t} (session_id, position)",
        ]
    }

    def __init__(self, prefix: str = "rm_") -> None:
        super().__init__(prefix)
        self._insert = (
            f"INSERT INTO {self.t['learned_deliveries']} ({', '.join(_COLUMNS)}) "
            f"VALUES ({','.join('?' * len(_COLUMNS))})"
        )

    def record(
        self,
        cur: Cursor,
        e: Envelope,
        items: Sequence[dict[str, Any]],
        *,
        session_id: str | None,
        turn_id: str | None,
        dispatch_id: str | None = None,
        task_id: str | None = None,
        attempt: int | None = None,
    ) -> None:
        """One row per item (domain/learned_delivery.py's shape) one event delivered."""
        cur.executemany(
            self._insert,
            [
                (
                    e.position,
                    e.at,
                    item["target_id"],
                    item["kind"],
                    item["agent_id"],
                    item["key"],
                    item.get("revision_id"),
                    item["content_digest"],
                    session_id,
                    turn_id,
                    dispatch_id,
                    task_id,
                    attempt,
                    # Items of earlier releases named no workspace.
                    item.get("workspace_id"),
                    item.get("delivered_in"),
                    item.get("scope"),
                )
                for item in items
            ],
        )

    @handles("HookDispatch.Created")
    def dispatched(self, cur: Cursor, e: Envelope) -> None:
        d = e.data
        items = d.get("learned")
        if not items:
            return  # nearly every dispatch: carried no learned content
        self.record(
            cur,
            e,
            items,
            session_id=str(d["session_id"]),
            turn_id=d["turn_id"],
            dispatch_id=e.key,
        )

    @handles("Task.Claimed")
    def attempt_started(self, cur: Cursor, e: Envelope) -> None:
        d = e.data
        items = d.get("learned")
        if not items:
            return  # nothing learned yet, or self-update work of a workspace not opted in
        self.record(
            cur,
            e,
            items,
            session_id=str(d["session_id"]),
            turn_id=d["turn_id"],
            task_id=e.key,
            attempt=int(d["attempt"]),
        )


# Reading

# The lifecycle event whose hook answer carried a delivery (SessionStart, UserPromptSubmit):
# its dispatch's hook audit records sit at the same session and position (that table's
# key), so this is one key lookup per row; null for a task attempt's prompt, and once the
# audit's per-session cap has dropped the dispatch.
_WITH_EVENT = (
    "SELECT d.*, (SELECT h.event FROM rm_hook_audit h WHERE h.session_id = d.session_id "
    "AND h.position = d.position ORDER BY h.seq LIMIT 1) AS event FROM rm_learned_deliveries d"
)


def delivery_row(r: dict[str, Any]) -> dict[str, Any]:
    """Wire shape of one delivery of a revision."""
    return {
        "sessionId": r["session_id"],
        "turnId": r["turn_id"],
        "dispatchId": r["dispatch_id"],
        "taskId": r["task_id"],
        "attempt": int(r["attempt"]) if r["attempt"] is not None else None,
        "event": r["event"],
        "at": r["at"],
        "position": int(r["position"]),
        "contentDigest": r["content_digest"],
        # Where the lesson's evidence arose, where it was delivered, and how it got there
        # (`workspace`: its own, `promoted`, `global`).
        "originWorkspaceId": r["origin_workspace_id"],
        "workspaceId": r["delivered_in"],
        "scope": r["scope"],
    }


def revision_deliveries(
    store: ReadStore, revision_id: str, *, limit: int, before: int | None
) -> dict[str, Any]:
    """The deliveries that carried a revision, newest first, with their total and latest."""
    with store.transaction(write=False) as cur:
        cur.execute(
            "SELECT COUNT(*) AS n, MAX(at) AS latest FROM rm_learned_deliveries "
            "WHERE revision_id = ?",
            (revision_id,),
        )
        totals = cur.fetchone()
        cur.execute(
            f"{_WITH_EVENT} WHERE d.revision_id = ? AND d.position < ? "
            "ORDER BY d.position DESC, d.target_id LIMIT ?",
            (revision_id, before if before is not None else 2**62, limit),
        )
        rows = cur.fetchall()
    return {
        "items": [delivery_row(r) for r in rows],
        "count": int(totals["n"]) if totals else 0,
        "latestAt": totals["latest"] if totals else None,
    }


def delivery_totals(store: ReadStore, revision_id: str) -> dict[str, Any]:
    """How many deliveries carried a revision, and when the latest did."""
    row = store.query_one(
        "SELECT COUNT(*) AS n, MAX(at) AS latest FROM rm_learned_deliveries WHERE revision_id = ?",
        (revision_id,),
    )
    return {
        "count": int(row["n"]) if row else 0,
        "latestAt": row["latest"] if row else None,
    }


def delivery_item(r: dict[str, Any]) -> dict[str, Any]:
    """Wire shape of one delivered item, as a session's timeline lists it."""
    return {
        "targetId": r["target_id"],
        "kind": r["kind"],
        "agentId": r["agent_id"],
        "key": r["key"],
        "revisionId": r["revision_id"],
        "contentDigest": r["content_digest"],
        "dispatchId": r["dispatch_id"],
        "taskId": r["task_id"],
        "attempt": int(r["attempt"]) if r["attempt"] is not None else None,
        "event": r["event"],
        "position": int(r["position"]),
        "at": r["at"],
        "originWorkspaceId": r["origin_workspace_id"],
        "workspaceId": r["delivered_in"],
        "scope": r["scope"],
    }


def session_deliveries(
    store: ReadStore, session_id: str, *, low: int, high: int
) -> list[dict[str, Any]]:
    """A session's delivered items with low < position <= high, in log order."""
    rows = store.query(
        f"{_WITH_EVENT} WHERE d.session_id = ? AND d.position > ? "
        "AND d.position <= ? ORDER BY d.position, d.target_id",
        (session_id, low, high),
    )
    return [delivery_item(r) for r in rows]
