"""Auditor search read model: every tool call across sessions, searchable by tool, text
in its input summary, decision, workspace, session and time.

One row per PreToolUse (the call an agent asked to make, and the decision it got); how
it ended (its PostToolUse or PostToolUseFailure) is kept in a table of its own, keyed by
the call, and joined when read: the Post of a call whose hook stopped waiting arrives
before the decision on its Pre, and either order gives the same rows, live or rebuilt
(projections/call_endings.py derives the status from both). Rows are kept until their session
is deleted (the log keeps everything regardless). The input summaries also go into a
text-search table with the same row ids on SQLite (FTS5 with the trigram tokenizer);
PostgreSQL indexes the summary column itself with pg_trgm, so its planner weighs the
text index against the others in one table (projections/store.py). Either way a
substring of three characters or more is found without reading every row.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from domain.hook_config import TOOL_EVENTS
from projections import decided_by, deleted_sessions, policy_record, recorded_clock
from projections.base import Envelope, Projection, handles, iso
from projections.call_endings import decision_status, ended_status, held_for_approval
from projections.store import Cursor, ReadStore
from projections.timeline import call_status, deciding_handler

_CALL_COLUMNS = (
    "position",
    "session_id",
    "workspace_id",
    "turn_id",
    "tool_call_id",
    "tool",
    "summary",
    "decision",
    "handler_id",
    "status",
    "at",
    "agent",
    "subagent_id",
    "received_at",
    "recorded_at",
    "held",
    "decided_by",
    "policy",
    "policy_rule",
    "policy_mode",
)
_WORKSPACES_KEPT = 10_000
MIN_TEXT_SEARCH = 3  # a trigram index finds substrings of at least three characters


class ActivityProjection(Projection):
    name = "activity"
    tables = {
        "activity": [
            "CREATE TABLE IF NOT EXISTS {t} (position BIGINT PRIMARY KEY, "
            "session_id TEXT NOT NULL, workspace_id TEXT, turn_id TEXT, tool_call_id TEXT, "
            "tool TEXT, summary TEXT, decision TEXT NOT NULL, handler_id TEXT, status TEXT, "
            "held BIGINT, at TEXT NOT NULL, agent TEXT, subagent_id TEXT, "
            "received_at TEXT, recorded_at TEXT NOT NULL, decided_by TEXT, "
            "policy TEXT, policy_rule TEXT, policy_mode TEXT)",
            # A call's Post finds its row; the filters each read newest first.
            "CREATE INDEX IF NOT EXISTS {t}_call ON {t} (session_id, tool_call_id)",
            "CREATE INDEX IF NOT EXISTS {t}_tool ON {t} (tool, position)",
            "CREATE INDEX IF NOT EXISTS {t}_workspace ON {t} (workspace_id, position)",
            "CREATE INDEX IF NOT EXISTS {t}_decision ON {t} (decision, position)",
            # Partial: most calls match no rule, and their rows cost these no page.
            "CREATE INDEX IF NOT EXISTS {t}_rule ON {t} (policy_rule, position) "
            "WHERE policy_rule IS NOT NULL",
            "CREATE INDEX IF NOT EXISTS {t}_policy_mode ON {t} (policy_mode, position) "
            "WHERE policy_mode IS NOT NULL",
            "CREATE TRIGRAM INDEX IF NOT EXISTS {t}_summary_trgm ON {t} (summary)",
        ],
        "activity_text": ["CREATE TEXT SEARCH TABLE IF NOT EXISTS {t} (summary)"],
        # How each call ended, by call: written whether or not its Pre is in yet.
        "activity_endings": [
            "CREATE TABLE IF NOT EXISTS {t} (session_id TEXT NOT NULL, "
            "tool_call_id TEXT NOT NULL, position BIGINT NOT NULL, status TEXT NOT NULL, "
            "bytes BIGINT, duration_ms BIGINT, PRIMARY KEY (session_id, tool_call_id))"
        ],
        "activity_sessions": [
            "CREATE TABLE IF NOT EXISTS {t} (session_id TEXT PRIMARY KEY, workspace_id TEXT)"
        ],
        "activity_deleted": [deleted_sessions.DDL],
        "activity_clock": [recorded_clock.DDL],
    }
    # Columns later releases added: a table without them is rebuilt from the log (the
    # endings table came with "held": a live table without it lacks its rows).
    added_columns = {"activity": ("decided_by", "held", "policy")}

    def __init__(self, prefix: str = "rm_") -> None:
        super().__init__(prefix)
        self._calls: dict[tuple[str, str], dict[str, Any]] = {}
        self._endings: dict[tuple[str, str], tuple[Any, ...]] = {}
        self._workspaces: dict[str, str | None] = {}
        self._new_sessions: dict[str, str | None] = {}
        self._gone = deleted_sessions.DeletedSessions()
        self._gone.table = self.t["activity_deleted"]
        self._clock = recorded_clock.RecordedClock()
        self._clock.table = self.t["activity_clock"]

    def begin_batch(self, cur: Cursor) -> None:
        self._calls.clear()
        self._endings.clear()
        # A session's workspace never changes, so what was read stays true across
        # batches (and replicas); kept bounded.
        if len(self._workspaces) > _WORKSPACES_KEPT:
            self._workspaces.clear()
        self._new_sessions.clear()
        self._gone.forget()
        self._clock.begin(cur)

    @handles("Session.Created")
    def session_created(self, cur: Cursor, e: Envelope) -> None:
        workspace = e.data.get("workspace")
        self._workspaces[e.key] = workspace
        self._new_sessions[e.key] = workspace

    @handles("HookDispatch.Created")
    def dispatched(self, cur: Cursor, e: Envelope) -> None:
        d = e.data
        event = d["event_name"]
        if event not in TOOL_EVENTS:
            return
        recorded = self._clock.stamp(e.at)
        session_id = str(d["session_id"])
        if self._gone.is_gone(cur, session_id):
            return
        facts = d.get("facts") or {}
        call_key = d["tool_call_id"] or e.key
        if event == "PreToolUse":
            hit = d.get("policy") or {}
            self._calls[(session_id, call_key)] = {
                "position": e.position,
                "session_id": session_id,
                "workspace_id": self._workspace(cur, session_id),
                "turn_id": d["turn_id"],
                "tool_call_id": d["tool_call_id"],
                "tool": d["tool_name"],
                "summary": facts.get("input_summary"),
                "decision": d["outcome"],
                "handler_id": deciding_handler(d),
                "status": decision_status(d["outcome"]),
                "held": 1 if held_for_approval(d) else None,
                "at": e.at,
                "agent": d["agent"],
                "subagent_id": d["subagent_id"],
                "received_at": iso(d["received_at"]) if d.get("received_at") else None,
                "recorded_at": recorded,
                "decided_by": decided_by.stored(d),
                "policy": policy_record.stored(d),
                "policy_rule": hit.get("rule_id"),
                "policy_mode": hit.get("mode"),
            }
            return
        if d["tool_call_id"]:  # without one, no Pre can be matched to it
            self._endings[(session_id, call_key)] = (
                session_id,
                call_key,
                e.position,
                call_status(event, facts),
                (facts.get("response") or {}).get("bytes"),
                facts.get("duration_ms"),
            )

    def _workspace(self, cur: Cursor, session_id: str) -> str | None:
        if session_id not in self._workspaces:
            cur.execute(
                f"SELECT workspace_id FROM {self.t['activity_sessions']} WHERE session_id = ?",
                (session_id,),
            )
            row = cur.fetchone()
            self._workspaces[session_id] = None if row is None else row["workspace_id"]
        return self._workspaces[session_id]

    def end_batch(self, cur: Cursor) -> None:
        self._clock.end(cur)
        if self._new_sessions:
            cur.executemany(
                f"INSERT INTO {self.t['activity_sessions']} (session_id, workspace_id) "
                "VALUES (?, ?) ON CONFLICT (session_id) DO NOTHING",
                list(self._new_sessions.items()),
            )
            self._new_sessions.clear()
        if self._calls:
            calls = list(self._calls.values())
            columns = _CALL_COLUMNS
            cur.executemany(
                f"INSERT INTO {self.t['activity']} ({', '.join(columns)}) "
                f"VALUES ({','.join('?' * len(columns))})",
                [tuple(call.get(c) for c in columns) for call in calls],
            )
            texts = [(c["position"], c["summary"]) for c in calls if c["summary"]]
            if texts and cur.dialect == "sqlite":  # PostgreSQL indexes `summary` itself
                cur.executemany(
                    f"INSERT INTO {self.t['activity_text']} (rowid, summary) VALUES (?, ?)",
                    texts,
                )
            self._calls.clear()
        if self._endings:
            cur.executemany(
                f"INSERT INTO {self.t['activity_endings']} (session_id, tool_call_id, "
                "position, status, bytes, duration_ms) VALUES (?,?,?,?,?,?) "
                "ON CONFLICT (session_id, tool_call_id) DO UPDATE SET "
                "position = excluded.position, status = excluded.status, "
                "bytes = excluded.bytes, duration_ms = excluded.duration_ms",
                list(self._endings.values()),
            )
            self._endings.clear()

    @handles("Session.Deleted")
    def session_deleted(self, cur: Cursor, e: Envelope) -> None:
        self.end_batch(cur)
        table = self.t["activity"]
        cur.execute(
            f"DELETE FROM {self.t['activity_text']} WHERE rowid IN "
            f"(SELECT position FROM {table} WHERE session_id = ?)",
            (e.key,),
        )
        cur.execute(f"DELETE FROM {table} WHERE session_id = ?", (e.key,))
        cur.execute(f"DELETE FROM {self.t['activity_endings']} WHERE session_id = ?", (e.key,))
        self._gone.mark(cur, e.key)


# Searching


# The one vocabulary a search takes for a decision, over the API and the CLI alike: the
# decision column's words and the status column's (a denied call's status reads "denied").
OUTCOME = Literal["pass", "deny", "modify", "passed", "allowed", "denied", "modified"]
OUTCOME_WORDS: dict[str, str] = {
    "pass": "pass",
    "deny": "deny",
    "modify": "modify",
    "passed": "pass",
    "allowed": "pass",
    "denied": "deny",
    "modified": "modify",
}


@dataclass(frozen=True)
class ActivityQuery:
    """Filters of `GET /api/activity`; None means any. `since` and `until` bound
    `recorded_at` (projections/recorded_clock.py), the time that agrees with the log."""

    tool: str | None = None
    contains: str | None = None
    workspace_id: str | None = None
    session_id: str | None = None
    outcome: str | None = None
    rule_id: str | None = None
    policy_mode: str | None = None
    since: str | None = None
    until: str | None = None
    before: int | None = None
    limit: int = 50


def search_activity(store: ReadStore, q: ActivityQuery) -> tuple[list[dict[str, Any]], int | None]:
    """Matching tool calls, newest first (by log position); and the next page's `before`."""
    where: list[str] = []
    params: list[Any] = []
    for column, value in (
        ("a.tool", q.tool),
        ("a.workspace_id", q.workspace_id),
        ("a.session_id", q.session_id),
        ("a.decision", OUTCOME_WORDS.get(q.outcome, q.outcome) if q.outcome else None),
        ("a.policy_rule", q.rule_id),
        ("a.policy_mode", q.policy_mode),
    ):
        if value is not None:
            where.append(f"{column} = ?")
            params.append(value)
    if q.since is not None:
        where.append("a.recorded_at >= ?")
        params.append(q.since)
    if q.until is not None:
        where.append("a.recorded_at < ?")
        params.append(q.until)
    if q.before is not None:
        where.append("a.position < ?")
        params.append(q.before)
    source = "rm_activity a"
    if q.contains:
        if len(q.contains) >= MIN_TEXT_SEARCH:
            source, text_params = _text_search(store.dialect, q.contains)
            params = text_params + params
        else:
            where.append("LOWER(a.summary) LIKE ? ESCAPE '\\'")
            params.append(f"%{_like_escape(q.contains.lower())}%")
    # How each call ended, joined by call (see the module's note).
    endings = (
        "LEFT JOIN rm_activity_endings e ON e.session_id = a.session_id "
        "AND e.tool_call_id = a.tool_call_id"
    )
    head, _, text_match = source.partition(" WHERE ")
    sql = (
        "SELECT a.*, e.status AS ran, e.position AS ran_position, e.bytes, e.duration_ms "
        f"FROM {head} {endings}"
    )
    conditions = [text_match, *where] if text_match else where
    if conditions:
        sql += " WHERE " + " AND ".join(conditions)
    text_led = q.contains and len(q.contains) >= MIN_TEXT_SEARCH and store.dialect == "sqlite"
    sql += " ORDER BY rm_activity_text.rowid DESC" if text_led else " ORDER BY a.position DESC"
    sql += " LIMIT ?"
    rows = store.query(sql, [*params, q.limit])
    items = [_item(r) for r in rows]
    next_before = items[-1]["position"] if len(items) == q.limit else None
    return items, next_before


def _text_search(dialect: str, text: str) -> tuple[str, list[Any]]:
    """The FROM clause that restricts `a` to summaries containing `text` (any case)."""
    if dialect == "sqlite":
        # An FTS5 trigram phrase matches a substring; quotes inside are doubled. The text
        # index leads (CROSS JOIN fixes the order) and hands its matches newest first, so
        # a common word stops at `limit` instead of sorting every match.
        phrase = '"' + text.replace('"', '""') + '"'
        return (
            "rm_activity_text CROSS JOIN rm_activity a ON a.position = rm_activity_text.rowid "
            "WHERE rm_activity_text MATCH ?",
            [phrase],
        )
    return ("rm_activity a WHERE a.summary ILIKE ? ESCAPE '\\'", [f"%{_like_escape(text)}%"])


def _like_escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def _item(r: dict[str, Any]) -> dict[str, Any]:
    return {
        "position": int(r["position"]),
        "at": r["at"],
        "sessionId": r["session_id"],
        "workspaceId": r["workspace_id"],
        "turnId": r["turn_id"],
        "toolCallId": r["tool_call_id"],
        "tool": r["tool"],
        "summary": r["summary"],
        "decision": r["decision"],
        "handlerId": r["handler_id"],
        "status": ended_status(
            r["status"], bool(r["held"]), int(r["position"]), r["ran"], r["ran_position"]
        )
        or "no_result",
        "bytes": r["bytes"],
        "durationMs": r["duration_ms"],
        "agent": r["agent"],
        "subagentId": r["subagent_id"],
        "receivedAt": r["received_at"],
        "recordedAt": r["recorded_at"],
        "decidedBy": decided_by.loaded(r["decided_by"]),
        "policy": policy_record.loaded(r["policy"]),
    }
