"""The live stream: the one ordered log, told as the read-model rows its events changed.

A follower reads the log after a position, never further than every read model has
applied it, and turns each event a client can show into a message: an SSE event name,
the event's log position, and the row it changed in the wire shape of the GET routes
(so the same fields, redacted the same way). Reading rows only once they are applied
means a client that reads a GET after a message sees at least what the message said.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import anyio.to_thread

from domain.application import Tachograph
from domain.strict_json import dumps_readable
from projections.approvals import get_approval_row
from projections.base import Envelope
from projections.hook_audit import session_hook_records
from projections.runner import ProjectionRunner, decode
from projections.session_titles import with_session_titles
from projections.sessions import session_row
from projections.store import ReadStore
from projections.tasks import task_row
from projections.usage import sessions_usage

# Notifications read per query: a follower far behind catches up in bounded steps, and
# one step's rows are read in one short trip to the thread pool.
BATCH = 100
POLL_S = 0.1
KEEPALIVE_S = 15.0


@dataclass(frozen=True)
class Reads:
    """What a feed's loader reads rows with."""

    store: ReadStore
    grace_s: float  # sessions derive `no_signal` at read time, as GET /api/sessions does


@dataclass(frozen=True)
class Feed:
    """One message an event causes: its SSE name, which row, and how that row is read."""

    event: str
    # The row the event names; None: this event sends no message of this feed.
    row: Callable[[Envelope], str | None]
    load: Callable[[Reads, Envelope], dict[str, Any]]


@dataclass(frozen=True)
class Message:
    """One SSE message; `id` is None on all but the last message of a log position."""

    event: str
    data: dict[str, Any]
    id: int | None

    def encode(self) -> str:
        return dumps_readable(self.data, separators=(",", ":"))


def _aggregate(e: Envelope) -> str:
    return e.key


def _dispatch_session(e: Envelope) -> str:
    return str(e.data["session_id"])


def _session_of(e: Envelope) -> str:
    return _dispatch_session(e) if e.type in _OF_A_SESSION else e.key


# Events of another aggregate that change a session's row (its data names the session).
_OF_A_SESSION = frozenset({"HookDispatch.Created", "ModelRequest.Created"})


def _denial(e: Envelope) -> str | None:
    return e.key if e.data["outcome"] == "deny" else None


def _gone(row_id: str) -> dict[str, Any]:
    """A row no longer in its read model (deleted since): clients drop it."""
    return {"id": row_id, "deleted": True}


def load_session(reads: Reads, e: Envelope) -> dict[str, Any]:
    """The session's list row (never its messages), as GET /api/sessions shows it."""
    session_id = _session_of(e)
    row = reads.store.query_one("SELECT * FROM rm_sessions WHERE id = ?", (session_id,))
    if row is None:
        return _gone(session_id)
    usage = sessions_usage(reads.store, [session_id])[session_id]
    return {**session_row(row, reads.grace_s), "usage": usage}


def load_task(reads: Reads, e: Envelope) -> dict[str, Any]:
    """The task's board row (never its activity), as GET /api/tasks shows it."""
    row = reads.store.query_one("SELECT * FROM rm_tasks WHERE id = ?", (e.key,))
    return _gone(e.key) if row is None else task_row(row)


def load_denial(reads: Reads, e: Envelope) -> dict[str, Any]:
    """The denied dispatch's hook audit records, as GET /api/sessions/{id}/hooks shows them.

    Reads the session's records (at most 500) to pick the dispatch's: denials are rare,
    and the audit table is keyed by session. Empty once the session is deleted.
    """
    session_id = _dispatch_session(e)
    records = [r for r in session_hook_records(reads.store, session_id) if r["dispatchId"] == e.key]
    return {"sessionId": session_id, "dispatchId": e.key, "records": records}


def load_approval(reads: Reads, e: Envelope) -> dict[str, Any]:
    """The approval's row, as GET /api/approvals shows it (redacted input summary)."""
    row = get_approval_row(reads.store, e.key)
    return _gone(e.key) if row is None else with_session_titles(reads.store, [row])[0]


SESSION_UPDATED = Feed("session.updated", _session_of, load_session)
TASK_UPDATED = Feed("task.updated", _aggregate, load_task)
HOOK_DENIED = Feed("hook.denied", _denial, load_denial)
APPROVAL_REQUESTED = Feed("approval.requested", _aggregate, load_approval)
APPROVAL_DECIDED = Feed("approval.decided", _aggregate, load_approval)

# Topic → the messages its events cause, in the order they are sent. Every topic the
# sessions and tasks read models apply is here (tests/test_live_stream.py holds that).
FEEDS: Mapping[str, tuple[Feed, ...]] = {
    "Session.Created": (SESSION_UPDATED,),
    "Session.Renamed": (SESSION_UPDATED,),
    "Session.Archived": (SESSION_UPDATED,),
    "Session.Restored": (SESSION_UPDATED,),
    "Session.MessagesSaved": (SESSION_UPDATED,),
    "Session.Deleted": (SESSION_UPDATED,),
    # Hook events change a session's title, summary, status and signal times.
    "HookDispatch.Created": (SESSION_UPDATED, HOOK_DENIED),
    # A model request its runtime reported changes the session's usage.
    "ModelRequest.Created": (SESSION_UPDATED,),
    **{
        f"Task.{name}": (TASK_UPDATED,)
        for name in (
            "Created",
            "Claimed",
            "Completed",
            "Failed",
            "RetryScheduled",
            "DeadLettered",
            "Requeued",
            "RemediationLinked",
            "CancelRequested",
            "Cancelled",
            "Interrupted",
            "Resolved",
            "Deleted",
        )
    },
    # Held tool calls (docs/approvals.md): the operator page's badge and view follow these.
    "Approval.Requested": (APPROVAL_REQUESTED,),
    "Approval.Decided": (APPROVAL_DECIDED,),
    "Approval.Expired": (APPROVAL_DECIDED,),
    "Approval.Abandoned": (APPROVAL_DECIDED,),
}


class LiveStream:
    """Followers of the log for live clients; one per process, each client its own cursor."""

    def __init__(
        self,
        app: Tachograph,
        runner: ProjectionRunner,
        reads: Reads,
        feeds: Mapping[str, tuple[Feed, ...]] = FEEDS,
        *,
        batch: int = BATCH,
        poll_s: float = POLL_S,
        keepalive_s: float = KEEPALIVE_S,
    ) -> None:
        self.app = app
        self.runner = runner
        self.reads = reads
        self.feeds = feeds
        self.topics = sorted(feeds)
        self.batch = batch
        self.poll_s = poll_s
        self.keepalive_s = keepalive_s
        self.closed = False

    def close(self) -> None:
        """End every follower at its next poll (the server is shutting down)."""
        self.closed = True

    def head(self) -> int:
        """The log's last position: where a client that names none starts."""
        return self.app.recorder.max_notification_id() or 0

    def read(self, after: int, upto: int) -> tuple[list[Message], int]:
        """Messages of the events after `after` up to `upto`, and the position read to.

        Rows are read after the read models applied `upto`, so a row may already show a
        later event than the one whose message carries it; every message is still sent,
        in log order, so a client always ends at the newest row. A row several events of
        the batch name is read once.
        """
        notifications = self.app.recorder.select_notifications(
            start=after, limit=self.batch, stop=upto, topics=self.topics, inclusive_of_start=False
        )
        rows: dict[tuple[str, str], dict[str, Any]] = {}
        messages: list[Message] = []
        for notification in notifications:
            envelope = decode(self.app, notification)
            caused: list[tuple[str, dict[str, Any]]] = []
            for feed in self.feeds[notification.topic]:
                row_id = feed.row(envelope)
                if row_id is None:
                    continue
                key = (feed.event, row_id)
                if key not in rows:
                    rows[key] = feed.load(self.reads, envelope)
                caused.append((feed.event, rows[key]))
            # The id goes on the position's last message: a client cut off between two
            # messages of one event resumes before that event, and loses neither.
            messages.extend(
                Message(event, data, notification.id if i == len(caused) - 1 else None)
                for i, (event, data) in enumerate(caused)
            )
        full = len(notifications) == self.batch
        return messages, notifications[-1].id if full else upto

    async def follow(
        self, after: int, disconnected: Callable[[], Awaitable[bool]]
    ) -> AsyncIterator[Sequence[Message]]:
        """Batches of messages after `after`, as the read models apply the log.

        An empty batch means nothing was sent for `keepalive_s`: time for a keep-alive.
        Waiting is an asyncio sleep (no thread per client); only the reads go to the
        thread pool. While the read models lag, so does the stream: it never sends a
        row before its event is applied, and never skips one.
        """
        clock = asyncio.get_running_loop().time
        quiet_since = clock()
        while not self.closed and not await disconnected():
            # In memory: polling it costs nothing; the log is read only when it moved.
            applied = self.runner.position
            if applied > after:
                messages, after = await anyio.to_thread.run_sync(self.read, after, applied)
                if messages:
                    quiet_since = clock()
                    yield messages
                if applied > after:
                    continue  # a full batch: read on without sleeping
            if clock() - quiet_since >= self.keepalive_s:
                quiet_since = clock()
                yield []
            await asyncio.sleep(self.poll_s)
