"""Hook audit read model: per session the latest 500 handler records, by turn."""

from __future__ import annotations

from typing import Any

from projections import deleted_sessions, policy_record
from projections.base import Envelope, Projection, handles, iso
from projections.store import Cursor, ReadStore

AUDIT_CAP = 500


class HookAuditProjection(Projection):
    name = "hook_audit"
    tables = {
        "hook_audit": [
            # Keyed as it is read and capped, per session in log order: each record
            # written touches one b-tree fewer than with a key of its own `id`
            # (an index nobody looked rows up by).
            "CREATE TABLE IF NOT EXISTS {t} (id TEXT NOT NULL, session_id TEXT NOT NULL, "
            "dispatch_id TEXT NOT NULL, turn_id TEXT, event TEXT NOT NULL, handler_id TEXT, "
            "outcome TEXT NOT NULL, failure TEXT, reason TEXT, duration_ms INTEGER, "
            "at TEXT NOT NULL, position BIGINT NOT NULL, seq INTEGER NOT NULL, "
            "policy TEXT, PRIMARY KEY (session_id, position, seq))",
            "CREATE INDEX IF NOT EXISTS {t}_at ON {t} (at)",
        ],
        # Sessions deleted so far: dispatches that arrive for them later are not shown.
        "hook_deleted_sessions": [deleted_sessions.DDL],
    }
    # Columns later releases added: a table without them is rebuilt from the log.
    added_columns = {"hook_audit": ("policy",)}
    churned = ("hook_audit",)  # capped per session (`_cap`)
    # No index by turn: the one reader by turn (a Stop's count of `continue`s) scans a
    # session's rows by key, at most AUDIT_CAP of them, once per turn, while such an
    # index cost every record written two more pages (its insert, and its delete once
    # capped).

    def __init__(self, prefix: str = "rm_") -> None:
        super().__init__(prefix)
        # Per batch: records not yet written, sessions to cap, and which sessions are
        # gone (asked once per session per batch, not once per event).
        self._rows: list[tuple[Any, ...]] = []
        self._uncapped: set[str] = set()
        self._gone = deleted_sessions.DeletedSessions()
        self._gone.table = self.t["hook_deleted_sessions"]

    def begin_batch(self, cur: Cursor) -> None:
        self._rows.clear()
        self._uncapped.clear()
        self._gone.forget()

    @handles("HookDispatch.Created")
    def dispatched(self, cur: Cursor, e: Envelope) -> None:
        d = e.data
        session_id = str(d["session_id"])
        if self._gone.is_gone(cur, session_id):
            return
        dispatch_id = e.key
        # The rule that decided the dispatch (or would have, in shadow mode) is the
        # dispatch's, so each of its records names it.
        policy = policy_record.stored(d)
        # A dispatch without handlers still shows on the timeline, as one record
        # with no handler, so operators see every event the agent sent.
        runs = d["runs"] or [
            {
                "handler_id": None,
                "outcome": d["outcome"],
                "failure": None,
                "reason": d["note"],
                "duration_ms": 0,
            }
        ]
        self._rows.extend(
            (
                f"{dispatch_id}:{seq}",
                session_id,
                dispatch_id,
                d["turn_id"],
                d["event_name"],
                run["handler_id"],
                run["outcome"],
                run["failure"],
                run["reason"],
                run["duration_ms"],
                e.at,
                e.position,
                seq,
                policy,
            )
            for seq, run in enumerate(runs)
        )
        # Capping keeps "the latest 500", so doing it once per batch per session leaves
        # exactly the rows that capping after every insert would.
        self._uncapped.add(session_id)

    def end_batch(self, cur: Cursor) -> None:
        if self._rows:
            cur.executemany(
                f"INSERT INTO {self.t['hook_audit']} (id, session_id, dispatch_id, turn_id, "
                "event, handler_id, outcome, failure, reason, duration_ms, at, position, seq, "
                "policy) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                self._rows,
            )
            self._rows.clear()
        for session_id in sorted(self._uncapped):
            self._cap(cur, session_id)
        self._uncapped.clear()

    def _cap(self, cur: Cursor, session_id: str) -> None:
        # One statement, no fetch: in a pipelined PostgreSQL batch a fetch is a round trip.
        # With fewer than AUDIT_CAP rows the subquery is empty, the comparison NULL, and
        # nothing is deleted.
        table = self.t["hook_audit"]
        cur.execute(
            f"DELETE FROM {table} WHERE session_id = ? AND (position, seq) < ("
            f"SELECT position, seq FROM {table} WHERE session_id = ? "
            "ORDER BY position DESC, seq DESC LIMIT 1 OFFSET ?)",
            (session_id, session_id, AUDIT_CAP - 1),
        )

    @handles("Session.Deleted")
    def session_deleted(self, cur: Cursor, e: Envelope) -> None:
        session_id = e.key
        self.end_batch(cur)  # write what came before, then delete it with the rest
        cur.execute(f"DELETE FROM {self.t['hook_audit']} WHERE session_id = ?", (session_id,))
        self._gone.mark(cur, session_id)

    @handles("HookAuditRetention.Created", "HookAuditRetention.Applied")
    def retention(self, cur: Cursor, e: Envelope) -> None:
        self.end_batch(cur)  # cap first, exactly as event-at-a-time processing would have
        cur.execute(f"DELETE FROM {self.t['hook_audit']} WHERE at < ?", (iso(e.data["before"]),))


def _record(r: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": r["id"],
        "dispatchId": r["dispatch_id"],
        "turnId": r["turn_id"],
        "event": r["event"],
        "handlerId": r["handler_id"],
        "outcome": r["outcome"],
        "failure": r["failure"],
        "reason": r["reason"],
        "durationMs": r["duration_ms"],
        "at": r["at"],
        "policy": policy_record.loaded(r["policy"]),
    }


def session_hook_records(store: ReadStore, session_id: str) -> list[dict[str, Any]]:
    """The latest (at most 500) records of a session, oldest first."""
    rows = store.query(
        "SELECT * FROM rm_hook_audit WHERE session_id = ? ORDER BY position, seq",
        (session_id,),
    )
    return [_record(r) for r in rows]


def group_by_turn(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Records grouped per turn, turns in order of their first record."""
    turns: dict[str | None, list[dict[str, Any]]] = {}
    for record in records:
        turns.setdefault(record["turnId"], []).append(record)
    return [{"turnId": turn, "records": items} for turn, items in turns.items()]
