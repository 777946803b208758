"""Group commit: concurrent independent creates share one transaction.

A single writer thread takes everything queued and saves it with one
`Application.save()` (one transaction, one fdatasync / one table lock). While that
commit is in flight new requests queue up and form the next batch, so batching
grows with load and adds no delay to a lone request. A blocking caller that finds no
commit in flight leads: it commits on its own thread, taking along whatever is
queued, and saves the two thread hand-offs through the writer (each of which can
wait for the interpreter lock behind a busy thread). A conflict fails a whole
`save()`, so a failed batch is split: each aggregate is saved alone and each
caller gets its own result or its own error. Callers are answered only after
their events are durable.

`CommittedDispatches`, the ingest service's dispatch log, appends through it: from an
event loop without blocking it (the loop is woken once per committed batch), from a
plain thread by committing.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
from collections.abc import Awaitable, Callable
from concurrent.futures import Future
from functools import partial
from uuid import UUID

from eventsourcing.domain import Aggregate, DomainEventProtocol
from eventsourcing.persistence import IntegrityError

from domain.application import Tachograph
from domain.hook_dispatch_record import HookDispatch
from ingest.loop import Ready, running_loop
from ingest.ports import Build, Deliver, Done

log = logging.getLogger(__name__)


class _Pending:
    # A plain slotted class, not a dataclass with a Future: one is built per ingest
    # on the event loop, where a Future's Condition alone cost more than the rest.
    __slots__ = ("aggregate_id", "events", "build", "done", "deliver")

    def __init__(
        self,
        aggregate_id: UUID,
        events: list[DomainEventProtocol[UUID]] | Build,
        done: Done,
        deliver: Deliver | None = None,
    ) -> None:
        self.aggregate_id = aggregate_id
        # Collected up front (a failed save() would otherwise have consumed them), or
        # built by the committing thread just before its batch is saved.
        self.events: list[DomainEventProtocol[UUID]] = [] if callable(events) else events
        self.build: Build | None = events if callable(events) else None
        self.done = done
        self.deliver = deliver


class GroupCommitter:
    """Saves aggregates from many threads in shared transactions; record() blocks until durable."""

    def __init__(
        self,
        app: Tachograph,
        *,
        max_batch: int = 256,
        on_batch: Callable[[int], None] | None = None,
    ) -> None:
        self.app = app
        self.max_batch = max_batch
        self._on_batch = on_batch or (lambda size: None)
        self._queue: queue.SimpleQueue[_Pending | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        # Held by whoever is committing (writer thread or a leading caller): one
        # transaction at a time, so batches keep forming behind the one in flight.
        self._committing = threading.Lock()
        self._closed = False

    def record(self, aggregate: Aggregate) -> int:
        """Append the aggregate's pending events; return its last log position."""
        return self.record_events(aggregate.id, list(aggregate.collect_events()))

    def record_events(self, aggregate_id: UUID, events: list[DomainEventProtocol[UUID]]) -> int:
        """Append events (of `aggregate_id` and any others, atomically); return the
        last log position of `aggregate_id`'s events. Blocks until durable."""
        if self._closed:
            raise RuntimeError("group committer is closed")
        if not self._committing.acquire(blocking=False):
            return self.submit_events(aggregate_id, events).result()
        appended: Future[int] = Future()
        try:
            pending = _Pending(aggregate_id, events, _resolver(appended))
            queued = self._drain(self.max_batch - 1)
            if queued and queued[-1] is None:
                self._queue.put(queued.pop())  # the writer's stop marker: hand it back
            self._commit([pending, *(p for p in queued if p is not None)])
        finally:
            self._committing.release()
        return appended.result()

    def submit(self, aggregate: Aggregate, deliver: Deliver | None = None) -> Future[int]:
        """Queue the aggregate's pending events; see `submit_events`."""
        return self.submit_events(aggregate.id, list(aggregate.collect_events()), deliver)

    def submit_events(
        self,
        aggregate_id: UUID,
        events: list[DomainEventProtocol[UUID]],
        deliver: Deliver | None = None,
    ) -> Future[int]:
        """Queue one aggregate's new events; the future resolves once they are durable."""
        appended: Future[int] = Future()
        self.enqueue(aggregate_id, events, _resolver(appended), deliver)
        return appended

    def enqueue(
        self,
        aggregate_id: UUID,
        events: list[DomainEventProtocol[UUID]] | Build,
        done: Done,
        deliver: Deliver | None = None,
    ) -> None:
        """Queue one aggregate's new events; `done` gets the position once they are durable.

        `events` may be a function that builds them: it is called in the committing
        thread just before the batch is saved, and what it raises goes to `done` alone.

        `done` is called in the writer's thread, or through `deliver` (in the caller's
        thread) when given; every `done` of a batch that shares one `deliver` is called
        by a single delivery: an event loop then wakes once per batch, not per request.
        """
        self._ensure_started()
        self._queue.put(_Pending(aggregate_id, events, done, deliver))

    def close(self) -> None:
        """Finish queued work, then stop the writer (idempotent)."""
        with self._lock:
            self._closed = True
            thread, self._thread = self._thread, None
        if thread is not None:
            self._queue.put(None)
            thread.join(timeout=30)

    def _ensure_started(self) -> None:
        if self._thread is not None:
            return
        with self._lock:
            if self._closed:
                raise RuntimeError("group committer is closed")
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="group-commit", daemon=True)
                self._thread.start()

    def _run(self) -> None:
        while True:
            first = self._queue.get()
            if first is None:
                return
            with self._committing:
                batch = [first, *self._drain(self.max_batch - 1)]
                stop = batch[-1] is None
                self._commit([p for p in batch if p is not None])
            if stop:
                return

    def _drain(self, limit: int) -> list[_Pending | None]:
        """Up to `limit` queued items without waiting; a stop marker ends the list."""
        items: list[_Pending | None] = []
        while len(items) < limit:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                break
            items.append(item)
            if item is None:
                break
        return items

    def _commit(self, batch: list[_Pending]) -> None:
        self._on_batch(len(batch))
        outcomes: list[tuple[_Pending, int | BaseException]] = []
        built = [pending for pending in batch if _built(pending, outcomes)]
        if built:
            self._append(built, outcomes)
        # Keyed by equality: `loop.call_soon_threadsafe` is a new bound method each time
        # it is looked up, but all of them compare equal.
        by_deliver: dict[Deliver, list[tuple[_Pending, int | BaseException]]] = {}
        for pending, outcome in outcomes:
            if pending.deliver is None:
                _settle(pending, outcome)
            else:
                by_deliver.setdefault(pending.deliver, []).append((pending, outcome))
        for deliver, group in by_deliver.items():
            try:
                deliver(partial(_settle_all, group))
            except RuntimeError:  # its event loop is closed: nobody waits there any more
                _settle_all(group)

    def _append(
        self, batch: list[_Pending], outcomes: list[tuple[_Pending, int | BaseException]]
    ) -> None:
        """Save a batch; on a conflict, each alone, so only the culprit fails."""
        try:
            positions = self._save([e for p in batch for e in p.events])
        except IntegrityError:
            if len(batch) == 1:
                outcomes.append((batch[0], IntegrityError("conflict")))
                return
            for pending in batch:
                self._append([pending], outcomes)
            return
        except BaseException as exc:  # noqa: BLE001 - every waiter must be released
            outcomes.extend((pending, exc) for pending in batch)
            return
        outcomes.extend((pending, positions[pending.aggregate_id]) for pending in batch)

    def _save(self, events: list[DomainEventProtocol[UUID]]) -> dict[UUID, int]:
        recordings = self.app.save_events(events)
        positions: dict[UUID, int] = {}
        for recording in recordings:
            aggregate_id = recording.domain_event.originator_id
            positions[aggregate_id] = max(positions.get(aggregate_id, 0), recording.notification.id)
        if positions:
            self.app.on_commit(max(positions.values()))
        return positions


class CommittedDispatches:
    """Dispatches appended through the group commit, read back from the log.

    On an event loop an append joins the next batch and the loop is woken once per
    committed batch; in a plain thread the caller commits, leading a batch when no
    commit is in flight (ingest/group_commit.py).
    """

    def __init__(self, app: Tachograph, committer: GroupCommitter) -> None:
        self.app = app
        self.committer = committer

    def record(self, dispatch_id: UUID, events: list[DomainEventProtocol[UUID]]) -> int:
        return self.committer.record_events(dispatch_id, events)

    def append(self, dispatch_id: UUID, build: Build) -> Awaitable[int]:
        loop = running_loop()
        if loop is None:
            return Ready(self.committer.record_events(dispatch_id, build()))
        appended: asyncio.Future[int] = loop.create_future()

        def done(outcome: int | BaseException) -> None:
            # In the loop's thread (delivered once per batch), unless the loop closed.
            if appended.done() or loop.is_closed():
                return  # the request went away (cancelled), or the server stopped
            if isinstance(outcome, BaseException):
                appended.set_exception(outcome)
            else:
                appended.set_result(outcome)

        self.committer.enqueue(dispatch_id, build, done, loop.call_soon_threadsafe)
        return appended

    def stored(self, dispatch_id: UUID) -> HookDispatch | None:
        try:
            stored: Aggregate = self.app.repository.get(dispatch_id)
        except Exception:  # noqa: BLE001 - AggregateNotFoundError, or the store is down
            return None
        return stored if isinstance(stored, HookDispatch) else None

    def head(self) -> int | None:
        return self.app.recorder.max_notification_id()


def _built(pending: _Pending, outcomes: list[tuple[_Pending, int | BaseException]]) -> bool:
    """Build a pending append's events if it was queued as a builder; False (its error
    noted as its outcome) if building failed."""
    if pending.build is None:
        return True
    try:
        pending.events = pending.build()
    except Exception as exc:  # noqa: BLE001 - one caller's failure, not the batch's
        outcomes.append((pending, exc))
        return False
    finally:
        pending.build = None
    return True


def _resolver(future: Future[int]) -> Done:
    def resolve(outcome: int | BaseException) -> None:
        if isinstance(outcome, BaseException):
            future.set_exception(outcome)
        else:
            future.set_result(outcome)

    return resolve


def _settle(pending: _Pending, outcome: int | BaseException) -> None:
    try:
        pending.done(outcome)
    except Exception:  # noqa: BLE001 - one caller's callback must not cost the others theirs
        log.exception("group commit callback failed")


def _settle_all(group: list[tuple[_Pending, int | BaseException]]) -> None:
    for pending, outcome in group:
        _settle(pending, outcome)
