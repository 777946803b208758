"""Group commit: concurrent independent creates share one transaction.

A single writer thread takes everything queued and saves it with one
`Application.save()` (one transaction, one fdatasync / one table lock). While that
commit is in flight new requests queue up and form the next batch, so batching
grows with load and adds no delay to a lone request. A conflict fails a whole
`save()`, so a failed batch is split: each aggregate is saved alone and each
caller gets its own result or its own error. Callers are answered only after
their events are durable.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from uuid import UUID

from eventsourcing.domain import Aggregate, DomainEventProtocol
from eventsourcing.persistence import IntegrityError

from domain.application import Tachograph


@dataclass
class _Pending:
    aggregate_id: UUID
    # Collected up front: a failed save() would otherwise have consumed them.
    events: list[DomainEventProtocol[UUID]]
    result: Future[int] = field(default_factory=Future)


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
        self._closed = False

    def record(self, aggregate: Aggregate) -> int:
        """Append the aggregate's pending events; return its last log position."""
        return self.submit(aggregate).result()

    def submit(self, aggregate: Aggregate) -> Future[int]:
        """Queue the aggregate's pending events; the future resolves once they are durable."""
        self._ensure_started()
        pending = _Pending(aggregate.id, list(aggregate.collect_events()))
        self._queue.put(pending)
        return pending.result

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
            batch = [first]
            stop = False
            while len(batch) < self.max_batch:
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                if item is None:
                    stop = True
                    break
                batch.append(item)
            self._commit(batch)
            if stop:
                return

    def _commit(self, batch: list[_Pending]) -> None:
        self._on_batch(len(batch))
        try:
            positions = self._save([e for p in batch for e in p.events])
        except IntegrityError:
            if len(batch) == 1:
                batch[0].result.set_exception(IntegrityError("conflict"))
                return
            # One conflict failed everyone: retry each alone so only the culprit fails.
            for pending in batch:
                self._commit([pending])
            return
        except BaseException as exc:  # noqa: BLE001 - every waiter must be released
            for pending in batch:
                pending.result.set_exception(exc)
            return
        for pending in batch:
            pending.result.set_result(positions[pending.aggregate_id])

    def _save(self, events: list[DomainEventProtocol[UUID]]) -> dict[UUID, int]:
        recordings = self.app.save_events(events)
        positions: dict[UUID, int] = {}
        for recording in recordings:
            aggregate_id = recording.domain_event.originator_id
            positions[aggregate_id] = max(positions.get(aggregate_id, 0), recording.notification.id)
        if positions:
            self.app.on_commit(max(positions.values()))
        return positions
