"""Backtests (docs/policy.md, "Backtests"): a candidate document tried against the calls
on the record, before it bites.

The calls are read from the log itself, in order, a page at a time (the read models keep
only a summary of each call, the log keeps its facts), and only HookDispatch.Created
events of an event some rule is on are decoded. Nothing is recorded but the audit event
of the run (PolicyBacktest: who tried which digest over which window).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from datetime import datetime
from typing import Any, Final
from uuid import UUID

from domain.application import Tachograph
from domain.errors import RuleViolation
from domain.event_versions import upcast_state
from domain.policy.aggregate import PolicyBacktest
from domain.policy.backtest import Backtest, RecordedCall
from domain.policy.document import digest
from domain.policy.value import CallContext
from infra.log_scan import event_at_or_after, log_head, scan_topic
from infra.policy_source import COMPILER
from projections.call_endings import held_for_approval
from projections.store import ReadStore
from services.policies import validated

DISPATCH: Final = "HookDispatch.Created"
_SESSIONS_KEPT: Final = 50_000


def run_backtest(
    app: Tachograph,
    store: ReadStore,
    source: str,
    *,
    since: datetime | None,
    until: datetime | None,
    workspace_id: str | None,
    actor: str,
) -> dict[str, Any]:
    """What the candidate would have done to the recorded calls of the window (of one
    workspace's sessions, or of all); records who ran it."""
    document = validated(source)
    if workspace_id is not None:
        app.get_workspace(workspace_id)  # NotFound for a workspace never registered
    if since is not None and until is not None and since >= until:
        raise RuleViolation("since must be before until")
    started = time.perf_counter()
    test = Backtest(document, COMPILER)
    sessions = _Sessions(store)
    for position, data in _dispatches(app, test.events, since, until):
        session_id = _plain_id(data["session_id"])
        workspace, title = sessions.of(session_id)
        if workspace_id is not None and workspace != workspace_id:
            continue
        call = RecordedCall(position, session_id, data, _happened(data))
        test.judge(call, CallContext(session_id, workspace or "", data.get("agent"), title))
    report = test.report()
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
    seconds = time.perf_counter() - started
    return {
        "id": str(run.id),
        "digest": recorded,
        "workspaceId": workspace_id,
        "since": since.isoformat() if since else None,
        "until": until.isoformat() if until else None,
        **report,
        "evaluations": test.evaluations,
        "seconds": round(seconds, 3),
    }


def _dispatches(
    app: Tachograph, events: frozenset[str], since: datetime | None, until: datetime | None
) -> Iterator[tuple[int, dict[str, Any]]]:
    """(position, state) of every dispatch of `events` in the window, in log order."""
    head = log_head(app)
    after = _first_at_or_after(app, since, head) - 1 if since is not None else 0
    upto = _first_at_or_after(app, until, head) - 1 if until is not None else head
    # The stored JSON names the event as the transcoder writes it: a dispatch of an
    # event no rule is on is skipped without being decoded.
    encode = app.mapper.transcoder.encode
    markers = tuple(encode({"event_name": event})[1:-1] for event in events)
    for position, state in scan_topic(app, DISPATCH, after, upto):
        if any(marker in state for marker in markers):
            data = upcast_state(DISPATCH, json.loads(state))
            if data["event_name"] in events:
                yield position, data


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


def _plain_id(value: Any) -> str:
    """A UUID as the transcoder stores it ({"_type_": "uuid_hex", "_data_": hex}): the
    dispatches are decoded as plain JSON, which costs half of the transcoder's decode."""
    if isinstance(value, dict):
        value = value.get("_data_")
    return str(UUID(str(value)))


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
