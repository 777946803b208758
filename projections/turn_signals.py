"""Signals from real turns (SPEC §8.1): one candidate per finished turn, from the log.

Follows the hook dispatches of every session, turn by turn, and the task attempts, and
writes one candidate row per finished turn: `outcome` (the prompt is the goal, the
Stop's last assistant message the outcome) or `failure` (a StopFailure with the
runtime's error class; two or more failures of the same tool in the turn; the turn's
last tool call denied by policy, then the turn ended; a task attempt that failed or
was dead-lettered, with its classified error). A turn that failed gives only its
failure. The reflection worker turns candidates into Signal aggregates
(`pending_candidates`); SignalService's dedupe on (agentId, traceId, kind) makes that
safe from every replica.

Deterministic from the log, so `replay` rebuilds it: whether `evolution` was on is read
from the AutonomySettings events, not from the clock or another read model. While it
is off nothing is tracked (and turning it off forgets the open turns), so a turn gives
a signal only when evolution was on from its prompt to its end. Turn state lives in
rows (JSON, keys sorted) cached for one batch, as the timeline does.

With TACHOGRAPH_RECORD=metadata a dispatch keeps no facts: the goal is then the
prompt's first line (≤ 80 characters), the outcome the first 500 characters of the
Stop's message, a tool failure has no error text (only PostToolUseFailure counts, not
a PostToolUse reporting an error) and a StopFailure's class is `stop_failure`.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from domain.agent_ids import TASKS_AGENT_ID, agent_id_for
from domain.lifecycle_events import (
    SESSION_END,
    SESSION_START,
    STOP,
    TOOL_EVENTS,
    USER_PROMPT_SUBMIT,
)
from domain.lifecycle_events import STOP_FAILURE as STOP_FAILURE_EVENT
from domain.log_chain import canonical_id
from domain.redaction import evidence
from domain.signal import signal_id
from projections import deleted_sessions
from projections.base import Envelope, Projection, handles
from projections.store import Cursor, ReadStore

TRACE_ID_LIMIT = 256
FAILURE_CLASS_LIMIT = 64
# Turns kept per session: a StopFailure can arrive after the session's next events
# (real payloads arrive out of order), never several prompts late.
TURNS_KEPT = 8
# Distinct failing calls remembered per tool: two make the pattern, the rest is count.
CALLS_KEPT = 8
REPEATED = 2
# Failure classes of the turn's own failures (a StopFailure names the runtime's).
TOOL_FAILURE, POLICY_DENIED, STOP_FAILURE = "tool_failure", "policy_denied", "stop_failure"

TURN_EVENTS = frozenset(
    {SESSION_START, USER_PROMPT_SUBMIT, *TOOL_EVENTS, STOP, STOP_FAILURE_EVENT, SESSION_END}
)
# How a turn ended: it gives a signal once, and a failure replaces an outcome.
OUTCOME, FAILURE, BLOCKED = "outcome", "failure", "blocked"


def trace_id_of(session_id: str, turn_id: str | None, prompt_position: int) -> str:
    """`<sessionId>:<turnId>`, or `<sessionId>:<position of the turn's prompt>` without a
    turn id; a turn id too long for a trace id is named by its SHA-256."""
    if turn_id is None:
        return f"{session_id}:{prompt_position}"
    trace = f"{session_id}:{turn_id}"
    if len(trace) > TRACE_ID_LIMIT:
        trace = f"{session_id}:sha256:{hashlib.sha256(turn_id.encode()).hexdigest()}"
    return trace


def task_trace_id(task_id: str, attempt: int) -> str:
    return f"task:{task_id}:{attempt}"


def _target_ids(learned: Any) -> set[str]:
    """The target ids a dispatch's (or attempt's) `learned` items name."""
    if not isinstance(learned, list):
        return set()
    return {
        str(item["target_id"])
        for item in learned
        if isinstance(item, dict) and item.get("target_id") is not None
    }


def _dumps(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


class TurnSignalsProjection(Projection):
    name = "turn_signals"
    tables = {
        "turn_signals": [
            "CREATE TABLE IF NOT EXISTS {t} (signal_id TEXT PRIMARY KEY, "
            "position BIGINT NOT NULL, at TEXT NOT NULL, agent_id TEXT NOT NULL, "
            "trace_id TEXT NOT NULL, kind TEXT NOT NULL, goal TEXT NOT NULL, outcome TEXT, "
            "failure TEXT, failure_class TEXT, session_id TEXT, turn_id TEXT, "
            "received TEXT NOT NULL, task_id TEXT, attempt INTEGER)",
            "CREATE INDEX IF NOT EXISTS {t}_pos ON {t} (position)",
            "CREATE INDEX IF NOT EXISTS {t}_session ON {t} (session_id)",
        ],
        "turn_signal_turns": [
            "CREATE TABLE IF NOT EXISTS {t} (session_id TEXT NOT NULL, turn_key TEXT NOT NULL, "
            "state TEXT NOT NULL, PRIMARY KEY (session_id, turn_key))"
        ],
        "turn_signal_sessions": [
            "CREATE TABLE IF NOT EXISTS {t} (session_id TEXT PRIMARY KEY, state TEXT NOT NULL)"
        ],
        "turn_signal_tasks": [
            "CREATE TABLE IF NOT EXISTS {t} (task_id TEXT PRIMARY KEY, goal TEXT NOT NULL, "
            "attempt INTEGER NOT NULL, session_id TEXT, turn_id TEXT, received TEXT NOT NULL)"
        ],
        "turn_signal_policy": [
            "CREATE TABLE IF NOT EXISTS {t} (id TEXT PRIMARY KEY, evolution BOOLEAN NOT NULL)"
        ],
        "turn_signal_deleted": [deleted_sessions.DDL],
    }

    def __init__(self, prefix: str = "rm_") -> None:
        super().__init__(prefix)
        self._gone = deleted_sessions.DeletedSessions()
        self._gone.table = self.t["turn_signal_deleted"]
        self._evolution: bool | None = None
        # One batch's session and turn state (None: known not to exist), and what to write.
        self._sessions: dict[str, dict[str, Any] | None] = {}
        self._turns: dict[tuple[str, str], dict[str, Any] | None] = {}
        self._dirty_sessions: set[str] = set()
        self._dirty_turns: set[tuple[str, str]] = set()

    def begin_batch(self, cur: Cursor) -> None:
        # Another runner may have applied events since: nothing is trusted across batches.
        self._evolution = None
        self._forget()

    def _forget(self) -> None:
        self._gone.forget()
        self._sessions.clear()
        self._turns.clear()
        self._dirty_sessions.clear()
        self._dirty_turns.clear()

    def end_batch(self, cur: Cursor) -> None:
        sessions, turns = self.t["turn_signal_sessions"], self.t["turn_signal_turns"]
        for sid in sorted(self._dirty_sessions):
            state = self._sessions[sid]
            assert state is not None
            cur.execute(
                f"INSERT INTO {sessions} (session_id, state) VALUES (?, ?) "
                "ON CONFLICT (session_id) DO UPDATE SET state = excluded.state",
                (sid, _dumps(state)),
            )
        for slot in sorted(self._dirty_turns):
            turn = self._turns[slot]
            if turn is None:
                cur.execute(f"DELETE FROM {turns} WHERE session_id = ? AND turn_key = ?", slot)
                continue
            cur.execute(
                f"INSERT INTO {turns} (session_id, turn_key, state) VALUES (?, ?, ?) "
                "ON CONFLICT (session_id, turn_key) DO UPDATE SET state = excluded.state",
                (*slot, _dumps(turn)),
            )
        self._forget()

    # Evolution

    def _evolving(self, cur: Cursor) -> bool:
        if self._evolution is None:
            cur.execute(f"SELECT evolution FROM {self.t['turn_signal_policy']}")
            row = cur.fetchone()
            self._evolution = bool(row and row["evolution"])
        return self._evolution

    @handles("AutonomySettings.Created")
    def settings_created(self, cur: Cursor, e: Envelope) -> None:
        cur.execute(
            f"INSERT INTO {self.t['turn_signal_policy']} (id, evolution) VALUES (?, ?) "
            "ON CONFLICT (id) DO NOTHING",
            (e.key, False),
        )
        self._evolution = None

    @handles("AutonomySettings.Changed")
    def settings_changed(self, cur: Cursor, e: Envelope) -> None:
        changes = e.data["changes"]
        if "evolution" not in changes:
            return
        on = bool(changes["evolution"])
        cur.execute(
            f"UPDATE {self.t['turn_signal_policy']} SET evolution = ? WHERE id = ?", (on, e.key)
        )
        self._evolution = on
        if not on:
            # Turns in progress are forgotten: none of them may give a signal now.
            self._forget()
            cur.execute(f"DELETE FROM {self.t['turn_signal_turns']}")
            cur.execute(f"DELETE FROM {self.t['turn_signal_sessions']}")

    # Hook turns

    @handles("HookDispatch.Created")
    def dispatched(self, cur: Cursor, e: Envelope) -> None:
        d = e.data
        event = d["event_name"]
        if event not in TURN_EVENTS or not self._evolving(cur):
            return
        sid = str(d["session_id"])
        if self._gone.is_gone(cur, sid):
            return
        session = self._session(cur, sid)
        learned = _target_ids(d.get("learned"))
        if event == "SessionStart":
            # What the session starts with stays in the agent's context for its turns.
            session["received"] = sorted(set(session["received"]) | learned)
            self._dirty_sessions.add(sid)
            return
        if event == "UserPromptSubmit":
            self._prompted(cur, e, sid, session, learned)
            return
        key = _turn_key(session, d)
        turn = self._turn(cur, sid, key) if key is not None else None
        if turn is None or turn["done"] in (FAILURE, BLOCKED):
            return
        if turn["done"] == OUTCOME and event != "StopFailure":
            return  # the same Stop again, or stragglers after the turn's end
        turn["received"] = sorted(set(turn["received"]) | learned)
        self._dirty_turns.add((sid, turn["key"]))
        facts = d.get("facts") or {}
        if event == "PreToolUse":
            turn["last_call"] = {
                "tool": d["tool_name"],
                "denied": d["outcome"] == "deny",
                "reason": d["reason"],
                "summary": facts.get("input_summary"),
            }
        elif event in ("PostToolUse", "PostToolUseFailure"):
            failed = event == "PostToolUseFailure" or facts.get("is_error") is True
            if failed and not facts.get("is_interrupt"):
                _tool_failed(turn, d["tool_name"] or "unknown", d["tool_call_id"], facts)
        elif event == "Stop":
            if d["outcome"] == "pass":  # `continue` (or a closed deny) keeps the turn going
                self._stopped(cur, e, sid, session, turn, facts)
        elif event == "StopFailure":
            error = facts.get("error")
            failure_class = (error or STOP_FAILURE)[:FAILURE_CLASS_LIMIT]
            detail = f"The runtime ended the turn with an error: {error or 'unknown'}."
            self._finished(cur, e, sid, session, turn, FAILURE, failure=detail, cls=failure_class)
        elif event == "SessionEnd":
            self._abandoned(cur, e, sid, session, turn)

    def _prompted(
        self, cur: Cursor, e: Envelope, sid: str, session: dict[str, Any], learned: set[str]
    ) -> None:
        d = e.data
        key = d["turn_id"] or f"@{e.position}"
        previous = session["current"]
        if previous is not None and previous != key:
            earlier = self._turn(cur, sid, previous)
            if earlier is not None and earlier["done"] is None:
                self._abandoned(cur, e, sid, session, earlier)
        turn = self._turn(cur, sid, key)
        if turn is None:
            prompt = (d.get("facts") or {}).get("prompt") or d["title_hint"]
            turn = {
                "key": key,
                "turn_id": d["turn_id"],
                "agent_id": agent_id_for(d["agent"]),
                "prompt_position": e.position,
                "goal": evidence(prompt) or "",
                "received": [],
                "failures": {},
                "last_call": None,
                "done": None,
            }
            self._turns[(sid, key)] = turn
            self._keep(sid, session, key)
        if turn["done"] is None and d["outcome"] == "deny":
            # The prompt never reached the agent: there is nothing it could learn.
            turn["done"] = BLOCKED
        turn["received"] = sorted(set(turn["received"]) | learned)
        self._dirty_turns.add((sid, key))
        session["current"] = key
        self._dirty_sessions.add(sid)

    def _keep(self, sid: str, session: dict[str, Any], key: str) -> None:
        """Add a turn to the session's kept ones, dropping the oldest beyond TURNS_KEPT."""
        kept: list[str] = [k for k in session["turns"] if k != key] + [key]
        for old in kept[:-TURNS_KEPT]:
            self._turns[(sid, old)] = None
            self._dirty_turns.add((sid, old))
        session["turns"] = kept[-TURNS_KEPT:]

    def _stopped(
        self,
        cur: Cursor,
        e: Envelope,
        sid: str,
        session: dict[str, Any],
        turn: dict[str, Any],
        facts: dict[str, Any],
    ) -> None:
        repeated = _repeated_failure(turn)
        if repeated is not None:
            self._finished(cur, e, sid, session, turn, FAILURE, failure=repeated, cls=TOOL_FAILURE)
            return
        call = turn["last_call"]
        if call is not None and call["denied"]:
            detail = f"{call['tool'] or 'A tool'} was denied by policy, then the turn ended"
            detail += f": {call['reason']}" if call["reason"] else "."
            if call["summary"]:
                detail += f"\nThe call: {call['summary']}"
            self._finished(cur, e, sid, session, turn, FAILURE, failure=detail, cls=POLICY_DENIED)
            return
        message = facts.get("last_assistant_message") or e.data["summary_hint"]
        self._finished(cur, e, sid, session, turn, OUTCOME, outcome=message)

    def _abandoned(
        self, cur: Cursor, e: Envelope, sid: str, session: dict[str, Any], turn: dict[str, Any]
    ) -> None:
        """A turn left without its Stop (the next prompt came, or the session ended): only
        its repeated tool failures say something, and its Stop may still come."""
        repeated = _repeated_failure(turn)
        if repeated is not None:
            self._finished(cur, e, sid, session, turn, FAILURE, failure=repeated, cls=TOOL_FAILURE)

    def _finished(
        self,
        cur: Cursor,
        e: Envelope,
        sid: str,
        session: dict[str, Any],
        turn: dict[str, Any],
        kind: str,
        *,
        outcome: str | None = None,
        failure: str | None = None,
        cls: str | None = None,
    ) -> None:
        turn["done"] = kind
        self._dirty_turns.add((sid, turn["key"]))
        trace = trace_id_of(sid, turn["turn_id"], turn["prompt_position"])
        turn_id = turn["turn_id"]
        self._candidate(
            cur,
            e,
            agent_id=turn["agent_id"],
            trace_id=trace,
            kind=kind,
            goal=turn["goal"],
            outcome=outcome,
            failure=failure,
            failure_class=cls,
            session_id=sid,
            turn_id=turn_id if turn_id is None or len(turn_id) <= TRACE_ID_LIMIT else None,
            received=set(session["received"]) | set(turn["received"]),
        )

    def _session(self, cur: Cursor, sid: str) -> dict[str, Any]:
        if sid not in self._sessions:
            cur.execute(
                f"SELECT state FROM {self.t['turn_signal_sessions']} WHERE session_id = ?", (sid,)
            )
            row = cur.fetchone()
            self._sessions[sid] = json.loads(row["state"]) if row else None
        state = self._sessions[sid]
        if state is None:
            state = self._sessions[sid] = {"current": None, "received": [], "turns": []}
        return state

    def _turn(self, cur: Cursor, sid: str, key: str) -> dict[str, Any] | None:
        slot = (sid, key)
        if slot not in self._turns:
            cur.execute(
                f"SELECT state FROM {self.t['turn_signal_turns']} "
                "WHERE session_id = ? AND turn_key = ?",
                slot,
            )
            row = cur.fetchone()
            self._turns[slot] = json.loads(row["state"]) if row else None
        return self._turns[slot]

    @handles("Session.Deleted")
    def session_deleted(self, cur: Cursor, e: Envelope) -> None:
        sid = e.key
        self._gone.mark(cur, sid)
        self._sessions.pop(sid, None)
        self._dirty_sessions.discard(sid)
        for slot in [slot for slot in self._turns if slot[0] == sid]:
            del self._turns[slot]
            self._dirty_turns.discard(slot)
        for table in ("turn_signal_turns", "turn_signal_sessions", "turn_signals"):
            cur.execute(f"DELETE FROM {self.t[table]} WHERE session_id = ?", (sid,))

    # Task attempts

    @handles("Task.Created")
    def task_created(self, cur: Cursor, e: Envelope) -> None:
        cur.execute(
            f"INSERT INTO {self.t['turn_signal_tasks']} (task_id, goal, attempt, received) "
            "VALUES (?, ?, 0, '[]') ON CONFLICT (task_id) DO NOTHING",
            (e.key, evidence(e.data["prompt"]) or ""),
        )

    @handles("Task.Claimed")
    def task_claimed(self, cur: Cursor, e: Envelope) -> None:
        d = e.data
        cur.execute(
            f"UPDATE {self.t['turn_signal_tasks']} SET attempt = ?, session_id = ?, turn_id = ?, "
            "received = ? WHERE task_id = ?",
            (
                d["attempt"],
                d["session_id"],
                d["turn_id"],
                _dumps(sorted(_target_ids(d.get("learned")))),
                e.key,
            ),
        )

    @handles("Task.Failed", "Task.DeadLettered")
    def task_failed(self, cur: Cursor, e: Envelope) -> None:
        if not self._evolving(cur):
            return
        cur.execute(f"SELECT * FROM {self.t['turn_signal_tasks']} WHERE task_id = ?", (e.key,))
        task = cur.fetchone()
        if task is None:
            return
        d = e.data
        attempt = int(d["attempt"])
        current = int(task["attempt"]) == attempt
        self._candidate(
            cur,
            e,
            agent_id=TASKS_AGENT_ID,
            trace_id=task_trace_id(e.key, attempt),
            kind=FAILURE,
            goal=task["goal"],
            outcome=None,
            failure=d["error"],
            failure_class=d["error_class"],
            session_id=task["session_id"] if current else None,
            turn_id=task["turn_id"] if current else None,
            received=set(json.loads(task["received"])) if current else set(),
            task=(e.key, attempt),
        )

    @handles("Task.Completed", "Task.Cancelled", "Task.Resolved", "Task.Deleted")
    def task_closed(self, cur: Cursor, e: Envelope) -> None:
        # None of these is ever claimed again; a failed task may be (after remediation).
        cur.execute(f"DELETE FROM {self.t['turn_signal_tasks']} WHERE task_id = ?", (e.key,))

    # Candidates

    def _candidate(
        self,
        cur: Cursor,
        e: Envelope,
        *,
        agent_id: str,
        trace_id: str,
        kind: str,
        goal: str,
        outcome: str | None,
        failure: str | None,
        failure_class: str | None,
        session_id: str | None,
        turn_id: str | None,
        received: set[str],
        task: tuple[str, int] | None = None,
    ) -> None:
        table = self.t["turn_signals"]
        if kind == FAILURE:
            # A turn that failed gives only its failure: an outcome it had is replaced.
            outcome_id = canonical_id(signal_id(agent_id, trace_id, OUTCOME))
            cur.execute(f"DELETE FROM {table} WHERE signal_id = ?", (outcome_id,))
        cur.execute(
            f"INSERT INTO {table} (signal_id, position, at, agent_id, trace_id, kind, goal, "
            "outcome, failure, failure_class, session_id, turn_id, received, task_id, attempt) "
            "VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?) ON CONFLICT (signal_id) DO NOTHING",
            (
                canonical_id(signal_id(agent_id, trace_id, kind)),
                e.position,
                e.at,
                agent_id,
                trace_id,
                kind,
                goal,
                evidence(outcome),
                evidence(failure),
                evidence(failure_class),
                session_id,
                turn_id,
                _dumps(sorted(received)),
                task[0] if task else None,
                task[1] if task else None,
            ),
        )


def _turn_key(session: dict[str, Any], d: dict[str, Any]) -> str | None:
    """The kept turn an event belongs to: its own turn id's, else the session's current
    one (events without a turn id, and a subagent's, are part of the latest prompt's)."""
    turn_id = d["turn_id"]
    if turn_id is not None and turn_id in session["turns"]:
        return str(turn_id)
    if turn_id is None or d["subagent_id"] is not None:
        current: str | None = session["current"]
        return current
    return None


def _tool_failed(
    turn: dict[str, Any], tool: str, call_id: str | None, facts: dict[str, Any]
) -> None:
    failures = turn["failures"]
    seen = failures.get(tool)
    if seen is None:
        seen = failures[tool] = {"count": 0, "calls": [], "error": None, "order": len(failures)}
    if call_id is not None:
        if call_id in seen["calls"]:
            return  # the same call's failure reported twice
        seen["calls"] = [*seen["calls"], call_id][-CALLS_KEPT:]
    seen["count"] += 1
    if seen["error"] is None:
        seen["error"] = evidence(facts.get("error"))


def _repeated_failure(turn: dict[str, Any]) -> str | None:
    """What failed repeatedly in the turn (the tool that failed most, first on a tie)."""
    repeated = [(t, f) for t, f in turn["failures"].items() if f["count"] >= REPEATED]
    if not repeated:
        return None
    tool, seen = min(repeated, key=lambda item: (-item[1]["count"], item[1]["order"]))
    detail = f"{tool} failed {seen['count']} times in one turn"
    return detail + (f": {seen['error']}" if seen["error"] else ".")


# Reading


def pending_candidates(store: ReadStore, after: int, limit: int) -> list[dict[str, Any]]:
    """Candidates past `after` that are no signal yet, oldest first."""
    rows = store.query(
        "SELECT * FROM rm_turn_signals c WHERE c.position > ? AND NOT EXISTS "
        "(SELECT 1 FROM rm_signals s WHERE s.id = c.signal_id) ORDER BY c.position LIMIT ?",
        (after, limit),
    )
    for row in rows:
        row["received"] = json.loads(row["received"])
    return rows
