"""Session timeline read model: per session its turns, each with its prompt, its tool
calls (Pre and Post paired by tool call id), its subagents, its Stop and any failure.

Built from the facts each dispatch records (domain/dispatch_facts.py). One row per
entry; a tool call's PreToolUse and its PostToolUse (or PostToolUseFailure) merge into
one row whichever arrives first, so a call without its Post, or a Post without its Pre,
still shows. The latest CALL_CAP tool calls and CALL_CAP other entries per session are
kept; older ones are served from the log (`timeline_from_log`).
"""

from __future__ import annotations

import json
from bisect import bisect_left
from collections.abc import Iterable
from typing import Any

from domain.lifecycle_events import (
    STOP,
    STOP_FAILURE,
    SUBAGENT_EVENTS,
    TOOL_EVENTS,
    USER_PROMPT_SUBMIT,
)
from projections import decided_by, deleted_sessions, policy_record, recorded_clock
from projections.base import Envelope, Projection, handles, iso
from projections.call_endings import DENIED, decision_status, ended_status, held_for_approval
from projections.deliveries import session_deliveries
from projections.store import Cursor, ReadStore

CALL_CAP = 2000
TIMELINE_EVENTS = frozenset(
    {USER_PROMPT_SUBMIT, *TOOL_EVENTS, *SUBAGENT_EVENTS, STOP, STOP_FAILURE}
)
# Columns, and how a later event's value merges into an entry: FIRST keeps what the
# entry already has (what the call was), LAST takes the newer value when it has one
# (how the call ended).
FIRST, LAST = "first", "last"
COLUMNS: dict[str, str] = {
    "turn_key": FIRST,
    "kind": FIRST,
    "lane": FIRST,
    "position": FIRST,
    "at": FIRST,
    "tool": FIRST,
    "tool_call_id": FIRST,
    "summary": FIRST,
    "subagent_id": FIRST,
    "agent_type": FIRST,
    "text": FIRST,
    "decision": LAST,
    "handler_id": LAST,
    "reason": LAST,
    "rewritten": LAST,
    "original": LAST,
    "status": LAST,
    "bytes": LAST,
    "duration_ms": LAST,
    "error": LAST,
    "result": LAST,
    "last_position": LAST,
    "received_at": FIRST,
    "recorded_at": FIRST,
    "decided_by": LAST,
    # The policy rule that decided the entry's dispatch, or would have in shadow mode.
    "policy": LAST,
    # A call's facts, each from the one event that states it; its status is derived from
    # all of them when read (projections/call_endings.py), whatever order they came in.
    "held": LAST,
    "pre_position": LAST,
    "pre_status": LAST,
    "ran": LAST,
    "ran_position": LAST,
}
_NAMES = ("session_id", "entry_key", *COLUMNS)


def entry_of(d: dict[str, Any], position: int, at: str) -> tuple[str, dict[str, Any]] | None:
    """The timeline entry one HookDispatch.Created contributes, keyed; None if none.

    `turn_key` is the runtime's turn id, or None when it sent none (the caller puts the
    entry in the session's current turn).
    """
    event = d["event_name"]
    if event not in TIMELINE_EVENTS:
        return None
    facts = d.get("facts") or {}
    received = d.get("received_at")
    entry: dict[str, Any] = {
        "turn_key": d["turn_id"],
        "lane": "turn",
        "position": position,
        "last_position": position,
        "at": at,
        "received_at": iso(received) if received is not None else None,
        "subagent_id": d["subagent_id"],
        "agent_type": facts.get("agent_type"),
    }
    key = f"{event}:{d['dispatch_id']}"
    if event == "UserPromptSubmit":
        entry |= {"kind": "prompt", "text": facts.get("prompt") or d["title_hint"]}
        entry |= _decided(d)
    elif event in ("PreToolUse", "PostToolUse", "PostToolUseFailure"):
        call_id = d["tool_call_id"]
        key = f"call:{call_id}" if call_id else key
        entry |= {
            "kind": "call",
            "lane": "call",
            "tool": d["tool_name"],
            "tool_call_id": call_id,
            "summary": facts.get("input_summary"),
        }
        entry |= (
            _pre(d, facts, position) if event == "PreToolUse" else _post(event, facts, position)
        )
    elif event in ("SubagentStart", "SubagentStop"):
        key = f"agent:{d['subagent_id']}" if d["subagent_id"] else key
        entry["kind"] = "subagent"
        if event == "SubagentStart":
            entry |= {"text": facts.get("prompt")} | _decided(d)
        else:
            entry |= {"result": facts.get("last_assistant_message"), "status": "stopped"}
    elif event == "Stop":
        message = facts.get("last_assistant_message") or d["summary_hint"]
        entry |= {"kind": "stop", "result": message} | _decided(d)
    else:
        entry |= {"kind": "failure", "error": facts.get("error") or d["note"]}
    return key, entry


def deciding_handler(d: dict[str, Any]) -> str | None:
    """The handler that made a dispatch's decision: the last run with that outcome. A
    pass is what happens when no handler objects, so no handler is named for it."""
    if d["outcome"] == "pass":
        return None
    deciding = [run for run in d["runs"] or () if run.get("outcome") == d["outcome"]]
    return deciding[-1].get("handler_id") if deciding else None


def call_status(event: str, facts: dict[str, Any]) -> str:
    """How a tool call ended, from its PostToolUse or PostToolUseFailure."""
    if facts.get("is_interrupt"):
        return "interrupted"
    if event == "PostToolUseFailure" or facts.get("is_error"):
        return "error"
    return "ok"


def _decided(d: dict[str, Any]) -> dict[str, Any]:
    return {
        "decision": d["outcome"],
        "handler_id": deciding_handler(d),
        "reason": d["reason"],
        "decided_by": decided_by.stored(d),
        "policy": policy_record.stored(d),
    }


def _pre(d: dict[str, Any], facts: dict[str, Any], position: int) -> dict[str, Any]:
    fields = _decided(d)
    if "original_input" in facts:
        fields["rewritten"] = _json(facts.get("input"))
        fields["original"] = _json(facts["original_input"])
    fields["pre_position"] = position
    fields["pre_status"] = decision_status(d["outcome"])
    fields["held"] = 1 if held_for_approval(d) else None
    return fields


def _post(event: str, facts: dict[str, Any], position: int) -> dict[str, Any]:
    response = facts.get("response") or {}
    return {
        "ran": call_status(event, facts),
        "ran_position": position,
        "bytes": response.get("bytes"),
        "duration_ms": facts.get("duration_ms"),
        "error": facts.get("error"),
    }


def _json(value: Any) -> str | None:
    return None if value is None else json.dumps(value, ensure_ascii=False)


def merge(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """One entry from two contributions, as the upsert in `end_batch` merges them."""
    merged = dict(old)
    for column, rule in COLUMNS.items():
        value = new.get(column)
        if value is not None and (rule == LAST or merged.get(column) is None):
            merged[column] = value
    return merged


class CurrentTurns:
    """Which turn an event without a turn id belongs to: the session's latest prompt's."""

    def __init__(self) -> None:
        self.latest: dict[str, str] = {}

    def place(self, session_id: str, entry: dict[str, Any], lookup: Any = None) -> None:
        if entry["kind"] == "prompt":
            entry["turn_key"] = entry["turn_key"] or f"@{entry['position']}"
            self.latest[session_id] = entry["turn_key"]
            return
        if entry["turn_key"] is not None:
            return
        if session_id not in self.latest and lookup is not None:
            # Asked once per session per batch: "no prompt yet" is an answer too.
            self.latest[session_id] = lookup(session_id) or ""
        entry["turn_key"] = self.latest.get(session_id, "")


class TimelineProjection(Projection):
    name = "timeline"
    tables = {
        "timeline": [
            "CREATE TABLE IF NOT EXISTS {t} (session_id TEXT NOT NULL, entry_key TEXT NOT NULL, "
            "turn_key TEXT NOT NULL, kind TEXT NOT NULL, lane TEXT NOT NULL, "
            "position BIGINT NOT NULL, "
            "last_position BIGINT NOT NULL, at TEXT NOT NULL, tool TEXT, tool_call_id TEXT, "
            "summary TEXT, subagent_id TEXT, agent_type TEXT, text TEXT, decision TEXT, "
            "handler_id TEXT, reason TEXT, rewritten TEXT, original TEXT, status TEXT, "
            "bytes BIGINT, duration_ms BIGINT, error TEXT, result TEXT, "
            "received_at TEXT, recorded_at TEXT NOT NULL, decided_by TEXT, held BIGINT, "
            "pre_position BIGINT, pre_status TEXT, ran TEXT, ran_position BIGINT, "
            "policy TEXT, PRIMARY KEY (session_id, entry_key))",
            # Capping walks a lane newest first; pages of turns read a session's rows.
            "CREATE INDEX IF NOT EXISTS {t}_lane ON {t} (session_id, lane, position)",
        ],
        "timeline_deleted": [deleted_sessions.DDL],
        "timeline_clock": [recorded_clock.DDL],
    }
    # Columns later releases added: a table without them is rebuilt from the log.
    added_columns = {
        "timeline": (
            "decided_by",
            "held",
            "pre_position",
            "pre_status",
            "ran",
            "ran_position",
            "policy",
        )
    }
    churned = ("timeline",)  # capped per session and lane (`_cap`), upserted per batch

    def __init__(self, prefix: str = "rm_") -> None:
        super().__init__(prefix)
        self._entries: dict[tuple[str, str], dict[str, Any]] = {}
        self._turns = CurrentTurns()
        self._gone = deleted_sessions.DeletedSessions()
        self._gone.table = self.t["timeline_deleted"]
        self._clock = recorded_clock.RecordedClock()
        self._clock.table = self.t["timeline_clock"]
        self._upsert = self._upsert_statement()

    def _upsert_statement(self) -> str:
        table = self.t["timeline"]
        updates = ", ".join(
            f"{c} = COALESCE(excluded.{c}, {table}.{c})"
            if rule == LAST
            else f"{c} = COALESCE({table}.{c}, excluded.{c})"
            for c, rule in COLUMNS.items()
            if c != "position"
        )
        return (
            f"INSERT INTO {table} ({', '.join(_NAMES)}) VALUES ({','.join('?' * len(_NAMES))}) "
            f"ON CONFLICT (session_id, entry_key) DO UPDATE SET {updates}"
        )

    def begin_batch(self, cur: Cursor) -> None:
        self._entries.clear()
        self._turns = CurrentTurns()
        self._gone.forget()
        self._clock.begin(cur)

    @handles("HookDispatch.Created")
    def dispatched(self, cur: Cursor, e: Envelope) -> None:
        found = entry_of(e.data, e.position, e.at)
        if found is None:
            return
        recorded = self._clock.stamp(e.at)  # every entry's event, shown or not: see below
        session_id = str(e.data["session_id"])
        if self._gone.is_gone(cur, session_id):
            return
        key, entry = found
        entry["recorded_at"] = recorded
        self._turns.place(session_id, entry, lambda sid: self._latest_turn(cur, sid))
        slot = (session_id, key)
        earlier = self._entries.get(slot)
        self._entries[slot] = merge(earlier, entry) if earlier is not None else entry

    def _latest_turn(self, cur: Cursor, session_id: str) -> str | None:
        cur.execute(
            f"SELECT turn_key FROM {self.t['timeline']} WHERE session_id = ? AND kind = 'prompt' "
            "ORDER BY position DESC LIMIT 1",
            (session_id,),
        )
        row = cur.fetchone()
        return None if row is None else str(row["turn_key"])

    def end_batch(self, cur: Cursor) -> None:
        self._clock.end(cur)
        if not self._entries:
            return
        rows = [
            (session_id, key, *(entry.get(column) for column in COLUMNS))
            for (session_id, key), entry in self._entries.items()
        ]
        cur.executemany(self._upsert, rows)
        # Only the lanes this batch wrote to can have grown past their cap.
        lanes = sorted(
            {(session_id, entry["lane"]) for (session_id, _), entry in self._entries.items()}
        )
        for session_id, lane in lanes:
            self._cap(cur, session_id, lane)
        self._entries.clear()

    def _cap(self, cur: Cursor, session_id: str, lane: str) -> None:
        # Tool calls and the other entries are capped apart, each at CALL_CAP. With fewer
        # rows the subquery is empty, the comparison NULL, and nothing is deleted.
        table = self.t["timeline"]
        cur.execute(
            f"DELETE FROM {table} WHERE session_id = ? AND lane = ? AND position < ("
            f"SELECT position FROM {table} WHERE session_id = ? AND lane = ? "
            "ORDER BY position DESC LIMIT 1 OFFSET ?)",
            (session_id, lane, session_id, lane, CALL_CAP - 1),
        )

    @handles("Session.Deleted")
    def session_deleted(self, cur: Cursor, e: Envelope) -> None:
        session_id = e.key
        self.end_batch(cur)
        cur.execute(f"DELETE FROM {self.t['timeline']} WHERE session_id = ?", (session_id,))
        self._gone.mark(cur, session_id)


# Reading


def session_timeline(
    store: ReadStore, session_id: str, limit: int, before: int | None
) -> tuple[list[dict[str, Any]], int | None]:
    """The session's turns, newest first: at most `limit` starting before `before`."""
    # One turn more than the page: where the oldest turn's deliveries begin.
    found = store.query(
        "SELECT turn_key, MIN(position) AS first FROM rm_timeline WHERE session_id = ? "
        "GROUP BY turn_key HAVING MIN(position) < ? ORDER BY first DESC LIMIT ?",
        (session_id, before if before is not None else 2**62, limit + 1),
    )
    turns = found[:limit]
    if not turns:
        return [], None
    keys = [str(t["turn_key"]) for t in turns]
    marks = ",".join("?" * len(keys))
    rows = store.query(
        f"SELECT * FROM rm_timeline WHERE session_id = ? AND turn_key IN ({marks}) "
        "ORDER BY position",
        (session_id, *keys),
    )
    built = build_turns(rows)
    ordered = [built[key] for key in keys if key in built]
    older = int(found[limit]["first"]) if len(found) > limit else 0
    attach_deliveries(store, session_id, ordered, older)
    next_before = int(turns[-1]["first"]) if len(turns) == limit else None
    return ordered, next_before


def attach_deliveries(
    store: ReadStore, session_id: str, turns: list[dict[str, Any]], older: int
) -> None:
    """Put on each turn (newest first) the learned items delivered to the session from
    just after the previous turn began up to its own start: at its prompt, and at a
    SessionStart before it. `older` is where the turn before the oldest one began (0:
    none). Read from the deliveries read model, which keeps every delivery."""
    if not turns:
        return
    starts = [int(turn["position"]) for turn in reversed(turns)]
    oldest_first = list(reversed(turns))
    for item in session_deliveries(store, session_id, low=older, high=starts[-1]):
        oldest_first[bisect_left(starts, item["position"])]["learned"].append(item)


def timeline_from_log(
    dispatches: Iterable[tuple[int, str, dict[str, Any]]], session_id: str
) -> list[dict[str, Any]]:
    """The whole timeline of one session rebuilt from its HookDispatch.Created events
    (position, at, data), for what the read model no longer keeps; newest turn first."""
    entries: dict[str, dict[str, Any]] = {}
    turns = CurrentTurns()
    # recorded_at as the read model derives it: advanced by the same events (every
    # timeline event of the log, whichever session), so both give the same values.
    latest = ""
    for position, at, data in dispatches:
        if data["event_name"] in TIMELINE_EVENTS:
            latest = max(latest, at)
        if str(data["session_id"]) != session_id:
            continue
        found = entry_of(data, position, at)
        if found is None:
            continue
        key, entry = found
        entry["recorded_at"] = latest
        turns.place(session_id, entry)
        earlier = entries.get(key)
        entries[key] = merge(earlier, entry) if earlier is not None else entry
    rows = [{column: entry.get(column) for column in COLUMNS} for entry in entries.values()]
    built = build_turns(sorted(rows, key=lambda row: int(row["position"])))
    return sorted(built.values(), key=lambda turn: -int(turn["position"]))


def build_turns(rows: Iterable[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Entries in log order, grouped into turns; subagents' calls nest under them."""
    turns: dict[str, dict[str, Any]] = {}
    agents: dict[tuple[str, str], dict[str, Any]] = {}
    for row in rows:
        key = str(row["turn_key"])
        turn = turns.get(key)
        if turn is None:
            turn = turns[key] = {
                "turnId": None if key.startswith("@") or not key else key,
                "position": int(row["position"]),
                "at": row["at"],
                "recordedAt": row["recorded_at"],
                "prompt": None,
                "calls": [],
                "subagents": [],
                "stop": None,
                "failure": None,
                # What the turn was given of the agent's learned content (see
                # `attach_deliveries`).
                "learned": [],
            }
        kind = row["kind"]
        if kind == "prompt":
            turn["prompt"] = {"text": row["text"], **_decision(row)}
        elif kind == "subagent":
            agent = _subagent(row)
            agents[(key, str(row["subagent_id"]))] = agent
            turn["subagents"].append(agent)
        elif kind == "call":
            subagent = row["subagent_id"]
            if subagent is None:
                turn["calls"].append(_call(row))
                continue
            parent = agents.get((key, str(subagent)))
            if parent is None:  # its SubagentStart is not kept: group the calls anyway
                parent = agents[(key, str(subagent))] = _subagent(row, placeholder=True)
                turn["subagents"].append(parent)
            parent["calls"].append(_call(row))
        elif kind == "stop":
            turn["stop"] = {"summary": row["result"], **_decision(row)}
        else:
            turn["failure"] = {"error": row["error"], "at": row["at"]}
    for turn in turns.values():
        calls = [*turn["calls"], *(c for a in turn["subagents"] for c in a["calls"])]
        turn["toolCalls"] = len(calls)
        turn["denials"] = sum(1 for c in calls if c["status"] == DENIED)
    return turns


def _decision(row: dict[str, Any]) -> dict[str, Any]:
    return {
        "decision": row["decision"],
        "handlerId": row["handler_id"],
        "reason": row["reason"],
        "decidedBy": decided_by.loaded(row["decided_by"]),
        "policy": policy_record.loaded(row["policy"]),
    }


def _subagent(row: dict[str, Any], placeholder: bool = False) -> dict[str, Any]:
    return {
        "subagentId": row["subagent_id"],
        "agentType": row["agent_type"],
        "prompt": None if placeholder else row["text"],
        "summary": None if placeholder else row["result"],
        "at": row["at"],
        "calls": [],
    }


def _call(row: dict[str, Any]) -> dict[str, Any]:
    return {
        "toolCallId": row["tool_call_id"],
        "tool": row["tool"],
        "summary": row["summary"],
        **_decision(row),
        "rewrittenInput": _loads(row["rewritten"]),
        "originalInput": _loads(row["original"]),
        "status": derived_status(row) or "no_result",
        "bytes": row["bytes"],
        "durationMs": row["duration_ms"],
        "error": row["error"],
        "agentType": row["agent_type"],
        "at": row["at"],
        "receivedAt": row["received_at"],
        "recordedAt": row["recorded_at"],
        "position": int(row["position"]),
    }


def derived_status(row: dict[str, Any]) -> str | None:
    """A call's status from the facts its row keeps (projections/call_endings.py)."""
    return ended_status(
        row["pre_status"],
        bool(row["held"]),
        row["pre_position"],
        row["ran"],
        row["ran_position"],
    )


def _loads(text: str | None) -> Any:
    return None if text is None else json.loads(text)
