"""Backtests (docs/policy.md, "Backtests"): a candidate document tried against the calls
on the record, before it bites.

The calls are read from the log itself, in order, a page at a time (the read models keep
only a summary of each call, the log keeps its facts), and only HookDispatch.Created
events of an event some rule is on are decoded. Nothing is recorded but the audit event
of the run (PolicyBacktest: who tried which digest over which window).
"""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import os
import re
import time
from collections.abc import Iterator
from datetime import datetime
from typing import Any, Final
from uuid import UUID

from domain.application import Tachograph
from domain.casing import to_camel
from domain.errors import RuleViolation
from domain.event_versions import upcast_state
from domain.policy.aggregate import PolicyBacktest
from domain.policy.backtest import Backtest, RecordedCall, Tally
from domain.policy.document import digest
from domain.policy.value import CallContext
from infra.log_scan import event_at_or_after, log_head, scan_topic
from infra.policy_source import COMPILER
from projections.call_endings import held_for_approval
from projections.store import ReadStore
from services.policies import validated

DISPATCH: Final = "HookDispatch.Created"
_SESSIONS_KEPT: Final = 50_000
CHUNK: Final = 2_000
PAGE: Final = 5_000  # log positions read at a time
# A window of at least this many log positions is judged by worker processes, one per
# CPU: the evaluation is CPU-bound Python, and off the serving process it never holds
# the interpreter lock the hook path needs. Smaller ones are judged in this process.
PARALLEL_FROM: Final = 50_000
# How the transcoder stores a dispatch's session: read without decoding the event.
_SESSION_ID: Final = re.compile(rb'"session_id":\{"_type_":"uuid_hex","_data_":"([0-9a-f]{32})"')

# (position, session id, stored state, the session's workspace, its title)
Row = tuple[int, str, bytes, str | None, str | None]


def run_backtest(
    app: Tachograph,
    store: ReadStore,
    source: str,
    *,
    since: datetime | None,
    until: datetime | None,
    workspace_id: str | None,
    actor: str,
    workers: int | None = None,
) -> dict[str, Any]:
    """What the candidate would have done to the recorded calls of the window (of one
    workspace's sessions, or of all); records who ran it. `workers`: how many processes
    judge (default: one per CPU for a large window, else none)."""
    document = validated(source)
    if workspace_id is not None:
        app.get_workspace(workspace_id)  # NotFound for a workspace never registered
    if since is not None and until is not None and since >= until:
        raise RuleViolation("since must be before until")
    started = time.perf_counter()
    test = Backtest(document, COMPILER)
    head = log_head(app)
    after = _first_at_or_after(app, since, head) - 1 if since is not None else 0
    upto = _first_at_or_after(app, until, head) - 1 if until is not None else head
    if workers is None:
        workers = _cpus() if upto - after >= PARALLEL_FROM else 1
    chunks = _chunks(_rows(app, store, test.events, after, upto, workspace_id))
    if workers <= 1:
        for chunk in chunks:
            _judge_rows(test, chunk)
        tally = test.take()
    else:
        tally = Tally()
        context = multiprocessing.get_context("spawn")  # no connection of ours is inherited
        with context.Pool(workers, _start_worker, (source,)) as pool:
            for part in pool.imap(_judge_chunk, chunks):
                tally.merge(part)
    report = _camel(tally.report(document))
    recorded = "sha256:" + digest(source)
    run = PolicyBacktest(
        digest=recorded,
        workspace_id=workspace_id,
        since=since,
        until=until,
        evaluated=report["evaluated"],
        unjudged=report["unjudged"],
        actor=actor,
    )
    app.record(run)
    return {
        "id": str(run.id),
        "digest": recorded,
        "workspaceId": workspace_id,
        "since": since.isoformat() if since else None,
        "until": until.isoformat() if until else None,
        **report,
        "workers": workers,
        "seconds": round(time.perf_counter() - started, 3),
    }


def _rows(
    app: Tachograph,
    store: ReadStore,
    events: frozenset[str],
    after: int,
    upto: int,
    workspace_id: str | None,
) -> Iterator[Row]:
    """Every dispatch in (after, upto] that may be of `events`, with its session's
    workspace and title, in log order; a dispatch of an event no rule is on is skipped
    without being decoded (the stored JSON names it as the transcoder writes it)."""
    encode = app.mapper.transcoder.encode
    markers = tuple(encode({"event_name": event})[1:-1] for event in events)
    sessions = _Sessions(store)
    for position, state in scan_topic(app, DISPATCH, after, upto, PAGE):
        if not any(marker in state for marker in markers):
            continue
        found = _SESSION_ID.search(state)
        session_id = (
            str(UUID(found.group(1).decode()))
            if found is not None
            else str(app.mapper.transcoder.decode(state)["session_id"])
        )
        workspace, title = sessions.of(session_id)
        if workspace_id is None or workspace == workspace_id:
            yield position, session_id, state, workspace, title


def _chunks(rows: Iterator[Row]) -> Iterator[list[Row]]:
    chunk: list[Row] = []
    for row in rows:
        chunk.append(row)
        if len(chunk) >= CHUNK:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def _judge_rows(test: Backtest, rows: list[Row]) -> None:
    for position, session_id, state, workspace, title in rows:
        data = upcast_state(DISPATCH, json.loads(state))
        call = RecordedCall(position, session_id, data, _happened(data))
        test.judge(call, CallContext(session_id, workspace or "", data.get("agent"), title))


# A worker process's candidate, compiled once; its kept verdicts serve every chunk.
_WORKER: list[Backtest] = []


def _start_worker(source: str) -> None:
    # Children of `serve` inherit its pinning to one CPU (infra/cpu_affinity.py).
    setter = getattr(os, "sched_setaffinity", None)
    if setter is not None:
        with contextlib.suppress(OSError):
            setter(0, range(os.cpu_count() or 1))
    _WORKER.append(Backtest(validated(source), COMPILER))


def _judge_chunk(rows: list[Row]) -> Tally:
    (test,) = _WORKER
    _judge_rows(test, rows)
    return test.take()


def _cpus() -> int:
    return max(1, os.cpu_count() or 1)


def _first_at_or_after(app: Tachograph, when: datetime, head: int) -> int:
    """The lowest log position recorded at or after `when` (head + 1: none), by bisection:
    the log's order is the order events were recorded in."""
    low, high = 1, head + 1
    while low < high:
        middle = (low + high) // 2
        found = event_at_or_after(app, middle)
        if found is None:
            high = middle
            continue
        position, state = found
        if app.mapper.transcoder.decode(state)["timestamp"] >= when:
            high = middle  # nothing is stored between `middle` and `position`
        else:
            low = position + 1
    return low


def _camel(value: Any) -> Any:
    """The report with the wire's casing (`sessionId`, `unjudgedBy`)."""
    if isinstance(value, dict):
        return {to_camel(key): _camel(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_camel(item) for item in value]
    return value


def _happened(data: dict[str, Any]) -> str:
    """What really happened to the call: held for a person, denied, given context, or
    let through."""
    if held_for_approval(data):
        return "ask"
    if data["outcome"] == "deny":
        return "deny"
    if data.get("additional_context"):
        return "context"
    return "allow"


class _Sessions:
    """Each session's workspace and title, read once per session (bounded)."""

    def __init__(self, store: ReadStore) -> None:
        self.store = store
        self.known: dict[str, tuple[str | None, str | None]] = {}

    def of(self, session_id: str) -> tuple[str | None, str | None]:
        found = self.known.get(session_id)
        if found is None:
            row = self.store.query_one(
                "SELECT workspace_id, title FROM rm_sessions WHERE id = ?", (session_id,)
            )
            found = (row["workspace_id"], row["title"]) if row is not None else (None, None)
            if len(self.known) >= _SESSIONS_KEPT:
                self.known.clear()
            self.known[session_id] = found
        return found
