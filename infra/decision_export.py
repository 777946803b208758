"""Hook decisions out as OpenTelemetry spans, off the hook path.

The hook path only appends a small tuple to a bounded queue (`DecisionExport.offer`:
a length check and a deque append); everything else happens on one export thread:
it wakes every schedule delay, waits briefly for the log's chain to reach each
decision's position (the link is computed by the chain projection after the commit),
encodes the spans straight to an OTLP request (infra/otlp_spans.py) and posts them in
batches (infra/otlp_http.py). A full queue drops the new decision, and a batch the
collector did not take (down, refusing, timing out) is dropped; both are counted on
/metrics, so exporting never slows, blocks or fails a hook.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Final, Protocol
from uuid import UUID

from prometheus_client import Counter

from domain.hook_dispatch import Decision
from domain.lifecycle import LifecycleEvent
from infra.decision_spans import SPAN_NAME, decision_attributes, span_times
from infra.otel_settings import HTTP_JSON, DecisionExportSettings
from infra.otlp_http import OtlpHttpSender
from infra.otlp_spans import (
    JSON_CONTENT_TYPE,
    PROTOBUF_CONTENT_TYPE,
    DecisionSpan,
    Encoder,
    json_encoder,
    parent_of,
    protobuf_encoder,
)

log = logging.getLogger(__name__)

DECISIONS_EXPORTED = Counter(
    "tachograph_otel_decisions_exported_total",
    "Hook decisions the OTLP collector accepted as spans",
)
DECISIONS_DROPPED = Counter(
    "tachograph_otel_decisions_dropped_total",
    "Hook decisions not exported as spans, by reason (queue_full, export_failed)",
    ["reason"],
)
QUEUE_FULL: Final = "queue_full"
EXPORT_FAILED: Final = "export_failed"
# How long a decision waits for its chain link before it is exported without one (the
# chain projection normally links a commit within milliseconds).
LINK_WAIT_S: Final = 2.0
# How long `close` gives the last batch.
CLOSE_TIMEOUT_S: Final = 5.0

# (session, event, dispatch, decision, position, received, recorded at ns)
Decided = tuple[UUID, LifecycleEvent, UUID, Decision, int | None, datetime, int]
# The chain links recorded at these positions (those not chained yet are missing).
LinksAt = Callable[[Sequence[int]], dict[int, str]]


class _Clock(Protocol):
    def __call__(self) -> float: ...


class SpanSender(Protocol):
    """Posts one encoded batch; whether the collector took it (never raises for that)."""

    def send(self, body: bytes) -> bool: ...

    def close(self) -> None: ...


class DecisionExport:
    """A bounded queue of decided hooks and the thread that exports them as spans."""

    def __init__(
        self,
        settings: DecisionExportSettings,
        sender: SpanSender,
        links_at: LinksAt | None = None,
        *,
        link_wait_s: float = LINK_WAIT_S,
        monotonic: _Clock = time.monotonic,
    ) -> None:
        self.settings = settings
        self._sender = sender
        resource = dict(settings.resource)
        choose = json_encoder if settings.protocol == HTTP_JSON else protobuf_encoder
        self._encode: Encoder = choose(resource, SPAN_NAME)
        self._links_at = links_at
        self._link_wait_ns = int(link_wait_s * 1e9)
        self._monotonic = monotonic
        self._queue: deque[Decided] = deque()
        self._max_queue = settings.max_queue
        self._queue_full = DECISIONS_DROPPED.labels(QUEUE_FULL)
        self._export_failed = DECISIONS_DROPPED.labels(EXPORT_FAILED)
        # Taken from the queue, waiting for their chain links.
        self._waiting: list[Decided] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    # --- the hook path ----------------------------------------------------------------

    def offer(
        self,
        session_id: UUID,
        ev: LifecycleEvent,
        dispatch_id: UUID,
        decision: Decision,
        position: int | None,
        received: datetime,
    ) -> None:
        """Queue one decision (never blocks; a full queue drops it and counts it)."""
        queue = self._queue
        if len(queue) >= self._max_queue:
            self._queue_full.inc()
            return
        queue.append((session_id, ev, dispatch_id, decision, position, received, time.time_ns()))

    # --- the export thread ------------------------------------------------------------

    def start(self) -> None:
        with self._lock:
            if self._thread is not None:
                return
            self._stop.clear()
            self._thread = threading.Thread(target=self._run, name="otel-decisions", daemon=True)
            self._thread.start()

    def close(self) -> None:
        """Export what is queued (without waiting for links), then stop (idempotent)."""
        with self._lock:
            thread, self._thread = self._thread, None
        if thread is not None:
            self._stop.set()
            thread.join(timeout=CLOSE_TIMEOUT_S)
        else:
            self.flush(final=True)
        self._sender.close()

    def _run(self) -> None:
        while not self._stop.wait(self.settings.schedule_delay_s):
            self._flush_logged(final=False)
        self._flush_logged(final=True)

    def _flush_logged(self, *, final: bool) -> None:
        try:
            self.flush(final=final)
        except Exception:  # noqa: BLE001 - the thread outlives one bad batch
            log.exception("hook decisions could not be exported")

    def flush(self, *, final: bool = False) -> int:
        """Export every queued decision whose chain link is known, or that waited long
        enough (all of them when `final`); the number exported."""
        while self._queue:
            self._waiting.append(self._queue.popleft())
        if not self._waiting:
            return 0
        links = self._links([item[4] for item in self._waiting if item[4] is not None])
        now_ns = time.time_ns()
        ready: list[tuple[Decided, str | None]] = []
        still: list[Decided] = []
        for item in self._waiting:
            position = item[4]
            link = links.get(position) if position is not None else None
            if link is not None or position is None or self._links_at is None or final:
                ready.append((item, link))
            elif now_ns - item[6] >= self._link_wait_ns or len(still) >= self._max_queue:
                ready.append((item, None))
            else:
                still.append(item)
        self._waiting = still
        exported = 0
        batch = self.settings.max_batch
        for start in range(0, len(ready), batch):
            exported += self._export(ready[start : start + batch])
        return exported

    def _links(self, positions: list[int]) -> dict[int, str]:
        if self._links_at is None or not positions:
            return {}
        try:
            return self._links_at(positions)
        except Exception:  # noqa: BLE001 - a read store hiccup: export without links
            log.warning("chain links unavailable for exported decisions", exc_info=True)
            return {}

    def _export(self, items: list[tuple[Decided, str | None]]) -> int:
        try:
            body = self._encode([decision_span(item, link) for item, link in items])
            sent = self._sender.send(body)
        except Exception:  # noqa: BLE001 - any failure of the export drops the batch
            log.warning("OTLP export of %d decisions failed", len(items), exc_info=True)
            sent = False
        if sent:
            DECISIONS_EXPORTED.inc(len(items))
            return len(items)
        self._export_failed.inc(len(items))
        return 0


def decision_span(item: Decided, link: str | None) -> DecisionSpan:
    """One decision as a span: a child of the runtime's trace context when it sent a valid
    one, else the root of a new trace. Every decision is exported, whatever sampling flag
    the runtime's context carries."""
    session_id, ev, dispatch_id, decision, position, received, ended_ns = item
    parent = parent_of(ev.trace_parent)
    if parent is None:
        trace_id, parent_id = _random_id(16), b""
    else:
        trace_id, parent_id = parent
    start, end = span_times(received, ended_ns)
    attributes = decision_attributes(session_id, ev, dispatch_id, decision, position, link)
    return trace_id, _random_id(8), parent_id, start, end, attributes


def _random_id(size: int) -> bytes:
    """A non-zero random trace or span id (as the OpenTelemetry SDK makes them)."""
    while True:
        value = random.getrandbits(size * 8)
        if value:
            return value.to_bytes(size, "big")


def otlp_sender(settings: DecisionExportSettings) -> OtlpHttpSender:
    """The OTLP/HTTP sender for the configured endpoint, protocol, headers, timeout,
    compression and TLS files."""
    content_type = JSON_CONTENT_TYPE if settings.protocol == HTTP_JSON else PROTOBUF_CONTENT_TYPE
    return OtlpHttpSender(settings, content_type)
