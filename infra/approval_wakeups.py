"""Cross-replica wake-ups for held approvals: PostgreSQL LISTEN/NOTIFY.

A decision made on one replica must reach the hook request another replica holds
within 100 ms. Polling the log for settlements bounds that by the poll interval plus
the poll's own round trip, both stretched under load; a NOTIFY sent once the decision
is durable wakes the holder as soon as the database delivers it. The log poll stays as
the safety net: a notification lost with a dropped connection is still found there.

The channel is named after the deployment's schema, so deployments sharing a database
(TACHOGRAPH_DATABASE_SCHEMA) do not wake each other. Sending happens on a thread of its
own: the save that settled an approval (often the group commit's writer) never waits
for the database a second time.
"""

from __future__ import annotations

import hashlib
import logging
import queue
import threading
from collections.abc import Callable
from uuid import UUID

import psycopg
from psycopg import sql

log = logging.getLogger(__name__)

RECONNECT_S = 1.0
# How often the listener looks up from its connection to see whether it should stop.
_LISTEN_TICK_S = 1.0


def channel_for(schema: str) -> str:
    """The NOTIFY channel of one deployment (an identifier within PostgreSQL's 63 bytes)."""
    return "tachograph_approvals_" + hashlib.sha256(schema.encode()).hexdigest()[:16]


class PgApprovalWakeups:
    """`notify(id)` after a settlement is durable; `listen(on_wake)` on every replica."""

    def __init__(self, conninfo: str, schema: str) -> None:
        self._conninfo = conninfo
        self.channel = channel_for(schema)
        self._outbox: queue.SimpleQueue[UUID | None] = queue.SimpleQueue()
        self._stop = threading.Event()
        self._listener: threading.Thread | None = None
        self._sender: threading.Thread | None = None
        self._on_wake: Callable[[UUID], None] | None = None
        self._lock = threading.Lock()

    def listen(self, on_wake: Callable[[UUID], None]) -> None:
        """Start listening (once); `on_wake` runs on the listener's thread."""
        with self._lock:
            if self._listener is None:
                self._on_wake = on_wake
                self._listener = self._started("approval-listen", self._listen)

    def notify(self, approval_id: UUID) -> None:
        """Tell every replica this approval settled (queued: never blocks the caller).

        The replica that decides is seldom one that holds a request: the sender starts
        with the first notification, not with listening."""
        with self._lock:
            if self._sender is None:
                self._sender = self._started("approval-notify", self._send)
        self._outbox.put(approval_id)

    def stop(self) -> None:
        with self._lock:
            self._stop.set()
            self._outbox.put(None)
            for thread in (self._listener, self._sender):
                if thread is not None:
                    thread.join(timeout=5)
            self._listener = self._sender = None

    def _started(self, name: str, target: Callable[[], None]) -> threading.Thread:
        thread = threading.Thread(target=target, name=name, daemon=True)
        thread.start()
        return thread

    def _connect(self) -> psycopg.Connection[tuple[object, ...]]:
        return psycopg.connect(self._conninfo, autocommit=True, connect_timeout=5)

    def _listen(self) -> None:
        while not self._stop.is_set():
            try:
                with self._connect() as conn:
                    conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(self.channel)))
                    while not self._stop.is_set():
                        for note in conn.notifies(timeout=_LISTEN_TICK_S):
                            self._woken(note.payload)
            except Exception as exc:  # noqa: BLE001 - the log poll still finds settlements
                log.warning("approval wake-ups: listening failed (%s); retrying", exc)
                self._stop.wait(RECONNECT_S)

    def _woken(self, payload: str) -> None:
        try:
            approval_id = UUID(payload)
        except ValueError:
            return  # not ours
        if self._on_wake is not None:
            self._on_wake(approval_id)

    def _send(self) -> None:
        conn: psycopg.Connection[tuple[object, ...]] | None = None
        while True:
            approval_id = self._outbox.get()
            if approval_id is None:
                break
            try:
                if conn is None or conn.closed:
                    conn = self._connect()
                conn.execute("SELECT pg_notify(%s, %s)", (self.channel, str(approval_id)))
            except Exception as exc:  # noqa: BLE001 - the holder's log poll still sees it
                log.warning("approval wake-ups: could not notify (%s)", exc)
                if conn is not None:
                    conn.close()
                conn = None
        if conn is not None:
            conn.close()
