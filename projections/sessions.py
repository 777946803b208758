"""Sessions read model: list rows, messages kept apart so lists never carry them."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from operator import itemgetter
from typing import Any

from projections.base import Envelope, Projection, handles
from projections.call_endings import held_for_approval
from projections.store import Cursor, ReadStore
from projections.usage import sessions_usage

SESSION_COLUMNS = (
    "id TEXT PRIMARY KEY, workspace_id TEXT NOT NULL, title TEXT, "
    "title_locked BOOLEAN NOT NULL, summary TEXT, agent_session_id TEXT, agent TEXT, "
    "status TEXT, first_signal_at TEXT, last_signal_at TEXT, archived_at TEXT, "
    "revision INTEGER NOT NULL, position BIGINT NOT NULL, "
    "created_at TEXT NOT NULL, updated_at TEXT NOT NULL"
)


_COLUMNS = tuple(c.split()[0] for c in SESSION_COLUMNS.split(", "))
_INSERTED = itemgetter(*_COLUMNS)  # a row's values in column order
_UPDATED = itemgetter(*_COLUMNS[1:])  # the same without the id


class SessionsProjection(Projection):
    """Sessions, enriched by every lifecycle event of theirs.

    Rows touched in a batch are kept in memory and written once at its end: a busy
    session gets one UPDATE per batch instead of a SELECT and an UPDATE per event,
    and a session created and renamed in one batch is inserted once, already renamed.
    """

    name = "sessions"
    tables = {
        "sessions": [
            "CREATE TABLE IF NOT EXISTS {t} (" + SESSION_COLUMNS + ")",
        ],
        "session_messages": [
            "CREATE TABLE IF NOT EXISTS {t} (id TEXT PRIMARY KEY, messages TEXT NOT NULL)"
        ],
    }
    deferred_indexes = {
        "sessions": [
            "CREATE INDEX IF NOT EXISTS {t}_ws ON {t} (workspace_id, position)",
        ]
    }

    def __init__(self, prefix: str = "rm_") -> None:
        super().__init__(prefix)
        # id -> the row as it stands in this batch (None: no such session).
        self._rows: dict[str, dict[str, Any] | None] = {}
        # id -> whether the table holds the row now (before this batch is written).
        self._stored: dict[str, bool] = {}
        self._dirty: dict[str, None] = {}  # ordered set
        self._new_messages: list[tuple[str, str]] = []  # message rows of sessions created

    def begin_batch(self, cur: Cursor) -> None:
        self._new_messages.clear()
        self._rows.clear()
        self._stored.clear()
        self._dirty.clear()

    @handles("Session.Created")
    def created(self, cur: Cursor, e: Envelope) -> None:
        d = e.data
        session_id = e.key
        # A session is created once (the log's version check), so there is no row yet.
        self._stored[session_id] = False
        self._rows[session_id] = {
            "id": session_id,
            "workspace_id": d["workspace"],
            "title": d["title"],
            "title_locked": d["title"] is not None,
            "summary": None,
            "agent_session_id": d["agent_session_id"],
            "agent": d["agent"],
            "status": None,
            "first_signal_at": None,
            "last_signal_at": None,
            "archived_at": None,
            "revision": 0,
            "position": e.position,
            "created_at": e.at,
            "updated_at": e.at,
        }
        self._dirty[session_id] = None
        self._new_messages.append((session_id, "[]"))

    @handles("Session.Renamed")
    def renamed(self, cur: Cursor, e: Envelope) -> None:
        self._update(cur, e, title=e.data["title"], title_locked=True)

    @handles("Session.Archived")
    def archived(self, cur: Cursor, e: Envelope) -> None:
        self._update(cur, e, archived_at=e.at)

    @handles("Session.Restored")
    def restored(self, cur: Cursor, e: Envelope) -> None:
        self._update(cur, e, archived_at=None)

    @handles("Session.MessagesSaved")
    def messages_saved(self, cur: Cursor, e: Envelope) -> None:
        self._update(cur, e, revision=e.data["revision"])
        self._insert_messages(cur)
        cur.execute(
            f"UPDATE {self.t['session_messages']} SET messages = ? WHERE id = ?",
            (json.dumps(e.data["messages"], separators=(",", ":")), e.key),
        )

    @handles("HookDispatch.Created")
    def hook_signal(self, cur: Cursor, e: Envelope) -> None:
        """Derive agent info, title, summary, signal times and status from a lifecycle event."""
        d = e.data
        session_id = str(d["session_id"])
        row = self._row(cur, session_id)
        if row is None:
            return  # deleted (or never created) sessions have no row to enrich
        changes: dict[str, Any] = {
            "first_signal_at": min(filter(None, (row["first_signal_at"], e.at))),
            "last_signal_at": max(filter(None, (row["last_signal_at"], e.at))),
        }
        if row["agent"] is None and d["agent"]:
            changes["agent"] = d["agent"]
        if row["agent_session_id"] is None and d["agent_session_id"]:
            changes["agent_session_id"] = d["agent_session_id"]
        if d["title_hint"] and row["title"] is None and not row["title_locked"]:
            changes["title"] = d["title_hint"]
        if d["event_name"] == "Stop" and d["summary_hint"]:
            changes["summary"] = d["summary_hint"]
        # A call held for an operator is recorded when its approval settles, perhaps
        # after the turn or the session ended: it says nothing of the session's state
        # now, so only calls answered as they came move the status.
        late = d["event_name"] == "PreToolUse" and held_for_approval(d)
        status = row["status"] if late else next_status(row["status"], d["event_name"])
        if status != row["status"]:
            changes["status"] = status
        self._update(cur, e, session_id=session_id, **changes)

    @handles("Session.Deleted")
    def deleted(self, cur: Cursor, e: Envelope) -> None:
        session_id = e.key
        if self._row(cur, session_id) is not None:
            self._rows[session_id] = None
            self._dirty[session_id] = None
        self._insert_messages(cur)
        cur.execute(f"DELETE FROM {self.t['session_messages']} WHERE id = ?", (session_id,))

    def _insert_messages(self, cur: Cursor) -> None:
        if self._new_messages:
            cur.executemany(
                # All placeholders: PostgreSQL then takes the rows in one statement.
                f"INSERT INTO {self.t['session_messages']} (id, messages) VALUES (?, ?)",
                self._new_messages,
            )
            self._new_messages.clear()

    def end_batch(self, cur: Cursor) -> None:
        self._insert_messages(cur)
        inserts, updates, deletes = [], [], []
        for session_id in self._dirty:
            row, stored = self._rows[session_id], self._stored[session_id]
            if row is None:
                deletes.append((session_id,))
            elif stored:
                updates.append((*_UPDATED(row), session_id))
            else:
                inserts.append(_INSERTED(row))
        table = self.t["sessions"]
        if deletes:
            cur.executemany(f"DELETE FROM {table} WHERE id = ?", deletes)
        if updates:
            assignments = ", ".join(f"{c} = ?" for c in _COLUMNS[1:])
            cur.executemany(f"UPDATE {table} SET {assignments} WHERE id = ?", updates)
        if inserts:
            placeholders = ",".join("?" * len(_COLUMNS))
            cur.executemany(
                f"INSERT INTO {table} ({', '.join(_COLUMNS)}) VALUES ({placeholders})", inserts
            )
        self.begin_batch(cur)

    def _row(self, cur: Cursor, session_id: str) -> dict[str, Any] | None:
        """The session's row as this batch has left it so far (read once per batch)."""
        if session_id not in self._rows:
            cur.execute(f"SELECT * FROM {self.t['sessions']} WHERE id = ?", (session_id,))
            found = cur.fetchone()
            row = None if found is None else {c: found[c] for c in _COLUMNS}
            self._rows[session_id] = row
            self._stored[session_id] = row is not None
        return self._rows[session_id]

    def _update(
        self, cur: Cursor, e: Envelope, session_id: str | None = None, **columns: Any
    ) -> None:
        session_id = session_id or e.key
        row = self._row(cur, session_id)
        if row is None:
            return  # as an UPDATE of a missing row: nothing
        row.update(columns, updated_at=e.at)
        self._dirty[session_id] = None


_STATUS_AFTER = {
    "UserPromptSubmit": "working",
    "PreToolUse": "working",
    "PostToolUse": "working",
    "PostToolUseFailure": "working",
    "SubagentStart": "working",
    "Notification": "waiting",
    "Stop": "idle",
    "SessionEnd": "ended",
}


def next_status(current: str | None, event: str) -> str | None:
    """Status after an event. `ended` is sticky: late stragglers (payloads arrive out of
    order, e.g. StopFailure after SessionEnd) never revive a session; only a new
    SessionStart (a resumed session) does."""
    if current == "ended":
        return "idle" if event == "SessionStart" else "ended"
    return _STATUS_AFTER.get(event, current)


def session_row(r: dict[str, Any], grace_s: float, now: datetime | None = None) -> dict[str, Any]:
    """Wire shape of a session row; `no_signal` is derived at read time from the grace."""
    status = r["status"]
    if status is None:
        now = now or datetime.now(UTC)
        silent_since = datetime.strptime(r["created_at"], "%Y-%m-%dT%H:%M:%S.%fZ").replace(
            tzinfo=UTC
        )
        status = "no_signal" if now - silent_since > timedelta(seconds=grace_s) else "idle"
    return {
        "id": r["id"],
        "workspaceId": r["workspace_id"],
        "title": r["title"],
        "titleLocked": bool(r["title_locked"]),
        "summary": r["summary"],
        "agentSessionId": r["agent_session_id"],
        "agent": r["agent"],
        "status": status,
        "firstSignalAt": r["first_signal_at"],
        "lastSignalAt": r["last_signal_at"],
        "archivedAt": r["archived_at"],
        "revision": int(r["revision"]),
        "createdAt": r["created_at"],
        "updatedAt": r["updated_at"],
    }


def list_sessions(
    store: ReadStore, *, archived: bool, workspace: str | None, limit: int, grace_s: float
) -> list[dict[str, Any]]:
    """Session rows without messages, newest first."""
    sql = "SELECT * FROM rm_sessions WHERE (archived_at IS NOT NULL) = ?"
    params: list[Any] = [archived]
    if workspace is not None:
        sql += " AND workspace_id = ?"
        params.append(workspace)
    sql += " ORDER BY position DESC LIMIT ?"
    params.append(limit)
    rows = [session_row(r, grace_s) for r in store.query(sql, params)]
    usage = sessions_usage(store, (row["id"] for row in rows))
    for row in rows:
        row["usage"] = usage[row["id"]]
    return rows


def session_ids_of_workspace(store: ReadStore, workspace: str) -> list[str]:
    """Every active and archived session of a workspace."""
    rows = store.query("SELECT id FROM rm_sessions WHERE workspace_id = ?", (workspace,))
    return [r["id"] for r in rows]


def session_ids_starting(store: ReadStore, prefix: str, limit: int = 6) -> list[str]:
    """Session ids that start with `prefix` (a short id as the operator page shows it)."""
    rows = store.query(
        "SELECT id FROM rm_sessions WHERE id LIKE ? ORDER BY id LIMIT ?",
        (prefix.replace("%", "").replace("_", "") + "%", limit),
    )
    return [str(r["id"]) for r in rows]


def session_exists(store: ReadStore, session_id: str) -> bool:
    """Whether the read model has this (live) session."""
    return store.query_one("SELECT 1 AS x FROM rm_sessions WHERE id = ?", (session_id,)) is not None


def get_session(store: ReadStore, session_id: str, grace_s: float) -> dict[str, Any] | None:
    """One session with its messages, or None."""
    row = store.query_one(
        "SELECT s.*, m.messages FROM rm_sessions s JOIN rm_session_messages m ON m.id = s.id "
        "WHERE s.id = ?",
        (session_id,),
    )
    if row is None:
        return None
    result = session_row(row, grace_s)
    result["usage"] = sessions_usage(store, [session_id])[session_id]
    result["messages"] = json.loads(row["messages"])
    return result
