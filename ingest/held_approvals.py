"""Hook requests held open on an approval, woken the moment it settles, on any replica.

A held request is an asyncio future, never a thread: hundreds can wait while the pool
serves every other hook. A decision made by this process wakes its waiters straight
from the save (`recorded`). One made by another replica arrives as a wake-up from the
database where there is one (PostgreSQL LISTEN/NOTIFY, infra/approval_wakeups.py), and
is in any case found by polling the log for approval settlements, once per interval
for all waiters together, and only while someone waits.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, Final, Protocol
from uuid import UUID

from anyio import to_thread
from eventsourcing.persistence import Recording

log = logging.getLogger(__name__)

SETTLED_TOPICS: Final = ("Approval.Decided", "Approval.Expired", "Approval.Abandoned")
# How a wait ended: the approval settled, the wait ran out, or the caller went away.
SETTLED, TIMED_OUT, GONE = "settled", "timed_out", "gone"
POLL_S: Final = 0.05
_BATCH: Final = 500


class Wakeups(Protocol):
    """Tells the other replicas that an approval settled, and hears when they do."""

    def listen(self, on_wake: Callable[[UUID], None]) -> None: ...

    def notify(self, approval_id: UUID) -> None: ...

    def stop(self) -> None: ...


class HeldApprovals:
    """Futures per approval id; settled by this process's saves, by wake-ups from the
    other replicas, or by the log poll."""

    def __init__(
        self, recorder: Any, poll_s: float = POLL_S, wakeups: Wakeups | None = None
    ) -> None:
        self._recorder = recorder
        self._poll_s = poll_s
        self._wakeups = wakeups
        self._waiting: dict[UUID, set[asyncio.Future[None]]] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._poller: asyncio.Task[None] | None = None
        self._position: int | None = None
        self._lock = threading.Lock()

    @property
    def waiting(self) -> int:
        """How many requests wait now (for metrics and tests)."""
        return sum(len(futures) for futures in self._waiting.values())

    async def wait(
        self,
        approval_id: UUID,
        timeout_s: float,
        pending: Callable[[], bool] | None = None,
        gone: Awaitable[None] | None = None,
    ) -> str:
        """Wait until the approval settles, `timeout_s` passes, or `gone` completes (the
        caller closed its connection); SETTLED, TIMED_OUT or GONE.

        `pending` is asked once the wait is registered: a decision made between the
        request and this call (saved, polled past) would otherwise go unseen.
        """
        loop = asyncio.get_running_loop()
        self._loop = loop
        if self._wakeups is not None:
            self._wakeups.listen(self._settled_threadsafe)  # once: the first wait starts it
        if self._position is None:
            # Settlements from here on: anything earlier is read from the aggregate anyway.
            self._position = await to_thread.run_sync(self._recorder.max_notification_id) or 0
        future: asyncio.Future[None] = loop.create_future()
        self._waiting.setdefault(approval_id, set()).add(future)
        if self._poller is None or self._poller.done():
            self._poller = loop.create_task(self._poll())
        watcher = asyncio.ensure_future(gone) if gone is not None else None
        try:
            if pending is not None and not await to_thread.run_sync(pending):
                return SETTLED
            waiters: set[asyncio.Future[None]] = {future}
            if watcher is not None:
                waiters.add(watcher)
            done, _ = await asyncio.wait(
                waiters, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED
            )
            if future in done:
                return SETTLED
            if watcher is not None and watcher in done and watcher.exception() is None:
                return GONE
            return TIMED_OUT
        finally:
            if watcher is not None:
                watcher.cancel()
            futures = self._waiting.get(approval_id)
            if futures is not None:
                futures.discard(future)
                if not futures:
                    del self._waiting[approval_id]

    def recorded(self, recordings: Iterable[Recording[UUID]]) -> None:
        """Called after every durable save of this process (any thread): wake at once."""
        for recording in recordings:
            if recording.notification.topic in SETTLED_TOPICS:
                approval_id = recording.domain_event.originator_id
                self._settled_threadsafe(approval_id)
                if self._wakeups is not None:
                    self._wakeups.notify(approval_id)

    def close(self) -> None:
        if self._wakeups is not None:
            self._wakeups.stop()

    def _settled_threadsafe(self, approval_id: UUID) -> None:
        loop = self._loop
        if loop is None or approval_id not in self._waiting:
            return
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits
            loop.call_soon_threadsafe(self._settled, approval_id)

    def _settled(self, approval_id: UUID) -> None:
        for future in self._waiting.get(approval_id, ()):
            if not future.done():
                future.set_result(None)

    async def _poll(self) -> None:
        """While anyone waits, read settlements other replicas appended to the log."""
        while self._waiting:
            await asyncio.sleep(self._poll_s)
            try:
                found = await to_thread.run_sync(self._read)
            except Exception:  # noqa: BLE001 - a store hiccup: the deadline still holds
                log.warning("approval poll failed", exc_info=True)
                continue
            for approval_id in found:
                self._settled(approval_id)

    def _read(self) -> list[UUID]:
        with self._lock:
            start = self._position or 0
            # Up to the head read first: the next poll starts there, however many other
            # events the log took meanwhile, so each poll reads only what is new.
            head = self._recorder.max_notification_id() or 0
            found: list[UUID] = []
            while start < head:
                notifications = self._recorder.select_notifications(
                    start=start,
                    limit=_BATCH,
                    stop=head,
                    topics=SETTLED_TOPICS,
                    inclusive_of_start=False,
                )
                found.extend(UUID(str(n.originator_id)) for n in notifications)
                if len(notifications) < _BATCH:
                    break
                start = notifications[-1].id
            self._position = max(start, head)
            return found
