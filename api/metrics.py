"""Prometheus metrics: every metric Tachograph exports, defined in one place.

Counters and histograms live in the process-wide registry and are observed through
small callbacks the composition root wires (domain code never imports prometheus).
Gauges that describe shared state (projection positions, lag, task states) are read
at scrape time by a collector bound to one `Services`, so several apps in one process
(tests) never fight over them. Label values are bounded: routes are templates, event
names outside the known vocabulary count as "other", handler ids come from the
validated hook configuration.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from domain.hook_config import EVENT_OUTCOMES
from domain.hook_dispatch import Decision

if TYPE_CHECKING:
    from bootstrap import Services
    from scheduler.runtime import Job

log = logging.getLogger(__name__)

_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)

HTTP_REQUESTS = Counter(
    "tachograph_http_requests_total",
    "HTTP requests by method, route template and status code",
    ["method", "route", "status"],
)
HTTP_LATENCY = Histogram(
    "tachograph_http_request_duration_seconds",
    "HTTP request latency by method and route template",
    ["method", "route"],
    buckets=_LATENCY_BUCKETS,
)
HTTP_IN_FLIGHT = Gauge("tachograph_http_requests_in_flight", "HTTP requests being served")
EVENTS_APPENDED = Counter(
    "tachograph_events_appended_total",
    "Events this process appended to the log, by event type",
    ["type"],
)
GROUP_COMMIT_BATCH = Histogram(
    "tachograph_group_commit_batch_size",
    "Aggregates saved per group-commit transaction on the ingest path",
    buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256),
)
HOOK_DISPATCHES = Counter(
    "tachograph_hook_dispatches_total",
    "Lifecycle events dispatched, by event and combined outcome",
    ["event", "outcome"],
)
HOOK_HANDLER_RUNS = Counter(
    "tachograph_hook_handler_runs_total",
    "Managed hook handler runs by handler, outcome and failure class ('' when none)",
    ["event", "handler", "outcome", "failure"],
)
HOOK_HANDLER_LATENCY = Histogram(
    "tachograph_hook_handler_duration_seconds",
    "Managed hook handler latency by handler",
    ["event", "handler"],
    buckets=_LATENCY_BUCKETS,
)
SCHEDULER_JOB_RUNS = Counter(
    "tachograph_scheduler_job_runs_total",
    "Scheduler job runs by job id and result (ok or error)",
    ["job", "result"],
)
SCHEDULER_JOB_LATENCY = Histogram(
    "tachograph_scheduler_job_duration_seconds",
    "Scheduler job run time by job id",
    ["job"],
    buckets=_LATENCY_BUCKETS,
)
WEBHOOK_REJECTED = Counter(
    "tachograph_webhook_rejected_total",
    "Coder webhook requests that failed verification, by reason",
    ["reason"],
)
FORBIDDEN = Counter(
    "tachograph_forbidden_total",
    "Requests refused 403 because the credential's role does not reach the route",
    ["route", "role"],
)
UNAUTHORIZED = Counter(
    "tachograph_unauthorized_total",
    "Requests refused 401, by what was wrong with the credential",
    ["reason"],
)
DATABASE_UNAVAILABLE = Counter(
    "tachograph_database_unavailable_total",
    "Requests answered 503 database_unavailable",
)

_KNOWN_EVENTS = frozenset(EVENT_OUTCOMES)


def event_label(event: str) -> str:
    """Known lifecycle event names as they are; anything else (clients may invent names) "other"."""
    return event if event in _KNOWN_EVENTS else "other"


# labels() takes a lock and builds a key on every call; the few (event, outcome)
# series are looked up once. Bounded: event_label folds unknown names into "other".
_DISPATCH_SERIES: dict[tuple[str, str], Any] = {}


def observe_dispatch(event: str, result: Decision) -> None:
    """Ingest observer: one decided dispatch and each of its handler runs."""
    label = event_label(event)
    key = (label, result.outcome)
    series = _DISPATCH_SERIES.get(key)
    if series is None:
        series = _DISPATCH_SERIES[key] = HOOK_DISPATCHES.labels(label, result.outcome)
    series.inc()
    for run in result.runs:
        HOOK_HANDLER_RUNS.labels(label, run.handler_id, run.outcome, run.failure or "").inc()
        HOOK_HANDLER_LATENCY.labels(label, run.handler_id).observe(run.duration_ms / 1000)


def observe_recorded(recordings: Sequence[Any]) -> None:
    """Application callback: events that became durable in one save."""
    counts: dict[str, int] = {}
    for recording in recordings:
        topic = recording.notification.topic
        counts[topic] = counts.get(topic, 0) + 1
    for topic, n in counts.items():
        EVENTS_APPENDED.labels(topic).inc(n)


def observe_batch(size: int) -> None:
    """Group-commit callback: aggregates in one transaction."""
    GROUP_COMMIT_BATCH.observe(size)


def instrument_jobs(jobs: Iterable[Job]) -> list[Job]:
    """The same jobs, each run counted and timed (errors re-raised for APScheduler to log)."""
    from scheduler.runtime import Job

    return [Job(job.id, _timed(job.id, job.func), job.trigger) for job in jobs]


def _timed(job_id: str, func: Callable[[], object]) -> Callable[[], object]:
    def run() -> object:
        started = time.perf_counter()
        try:
            result = func()
        except BaseException:
            SCHEDULER_JOB_RUNS.labels(job_id, "error").inc()
            raise
        finally:
            SCHEDULER_JOB_LATENCY.labels(job_id).observe(time.perf_counter() - started)
        SCHEDULER_JOB_RUNS.labels(job_id, "ok").inc()
        return result

    return run


class StateCollector(Collector):
    """Scrape-time gauges of one process's view of shared state.

    Each read is separate and failures are swallowed: a scrape during a database
    outage still answers with what it can (and `tachograph_database_up 0`).
    """

    def __init__(self, services: Services) -> None:
        self.services = services

    def collect(self) -> Iterator[GaugeMetricFamily]:
        s = self.services
        up = GaugeMetricFamily("tachograph_database_up", "1 when the event store answered")
        head: int | None
        try:
            head = s.app.recorder.max_notification_id() or 0
        except Exception:  # noqa: BLE001 - reported as the gauge's value
            head = None
        up.add_metric([], 1 if head is not None else 0)
        yield up
        if head is not None:
            yield GaugeMetricFamily(
                "tachograph_log_head_position", "Position of the newest event in the log", head
            )
        yield GaugeMetricFamily(
            "tachograph_projection_runner_position",
            "Lowest position every projection of this process has applied (in memory)",
            s.runner.position,
        )
        yield GaugeMetricFamily(
            "tachograph_projection_runner_failing",
            "1 while the projection runner's last batch failed (it retries)",
            1 if s.runner.last_error else 0,
        )
        try:
            positions = s.runner.positions()
        except Exception:  # noqa: BLE001 - database unreachable
            positions = {}
        position = GaugeMetricFamily(
            "tachograph_projection_position",
            "Tracked position per projection",
            labels=["projection"],
        )
        lag = GaugeMetricFamily(
            "tachograph_projection_lag_events",
            "Events in the log not yet applied, per projection",
            labels=["projection"],
        )
        for name, pos in sorted(positions.items()):
            position.add_metric([name], pos)
            if head is not None:
                lag.add_metric([name], max(head - pos, 0))
        yield position
        yield lag
        yield from self._tasks()
        yield from self._cycles()
        yield GaugeMetricFamily(
            "tachograph_scheduler_running",
            "1 while this process's scheduler is running",
            1 if s.scheduler.state == "running" else 0,
        )

    def _tasks(self) -> Iterator[GaugeMetricFamily]:
        from projections.stats import task_status_counts

        try:
            counts = task_status_counts(self.services.store)
        except Exception:  # noqa: BLE001 - database unreachable
            return
        tasks = GaugeMetricFamily("tachograph_tasks", "Tasks by status", labels=["status"])
        for status, n in sorted(counts.items()):
            tasks.add_metric([status], n)
        yield tasks
        running = self.services.tasks.executor if self.services.tasks is not None else None
        yield GaugeMetricFamily(
            "tachograph_executor_running_attempts",
            "Task attempts this process is executing",
            running.running() if running is not None else 0,
        )

    def _cycles(self) -> Iterator[GaugeMetricFamily]:
        from projections.self_update_cycles import cycle_outcome_counts

        try:
            counts = cycle_outcome_counts(self.services.store)
        except Exception:  # noqa: BLE001 - database unreachable
            return
        cycles = GaugeMetricFamily(
            "tachograph_self_update_cycles",
            "Self-update cycle attempts by how they ended (imported, noop, rejected, failed)",
            labels=["outcome"],
        )
        for outcome, n in sorted(counts.items()):
            cycles.add_metric([outcome], n)
        yield cycles


class ProcessMetrics:
    """What `/metrics` (or a worker's metrics port) serves: shared counters plus app state."""

    def __init__(self, services: Services) -> None:
        self.state = CollectorRegistry(auto_describe=False)
        self.state.register(StateCollector(services))

    def render(self) -> bytes:
        return generate_latest(REGISTRY) + generate_latest(self.state)

    content_type = CONTENT_TYPE_LATEST


def serve_metrics(metrics: ProcessMetrics, host: str, port: int) -> threading.Thread:
    """A tiny HTTP endpoint for processes without the API (`tachograph worker`)."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's naming
            if self.path.split("?")[0] != "/metrics":
                self.send_error(404)
                return
            body = metrics.render()
            self.send_response(200)
            self.send_header("Content-Type", metrics.content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
            pass  # scrapes are not worth a log line

    server = ThreadingHTTPServer((host, port), Handler)
    thread = threading.Thread(target=server.serve_forever, name="metrics", daemon=True)
    thread.start()
    return thread
