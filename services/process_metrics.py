"""Scrape-time gauges of one process's view of shared state, and what `/metrics` (or a
worker's metrics port) serves.

The gauges are read at scrape time by a collector bound to one process's services, so
several apps in one process (tests) never fight over them.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any, Protocol

from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from projections.runner import ProjectionRunner
from projections.store import ReadStore


class MetricSources(Protocol):
    """What the gauges read of a process's services (bootstrap.Services has them)."""

    app: Any  # the event-sourced application: its recorder knows the log's head
    runner: ProjectionRunner
    store: ReadStore
    scheduler: Any  # APScheduler's scheduler: its `state`
    tasks: Any  # the task runtime, when this process executes tasks


class StateCollector(Collector):
    """Scrape-time gauges of one process's view of shared state.

    Each read is separate and failures are swallowed: a scrape during a database
    outage still answers with what it can (and `tachograph_database_up 0`).
    """

    def __init__(self, services: MetricSources) -> None:
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

    def __init__(self, services: MetricSources) -> None:
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
