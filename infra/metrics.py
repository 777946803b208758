"""Prometheus counters of what the log, hook ingestion and the scheduler did, and the
callbacks the composition root wires to observe them (domain code never imports
prometheus). The HTTP layer's own counters are in api/metrics.py, the scrape-time
gauges of shared state in services/process_metrics.py. Label values are bounded: event
names outside the known vocabulary count as "other", handler ids come from the
validated hook configuration.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Protocol, TypeVar

from prometheus_client import Counter, Histogram

from domain.hook_dispatch import Decision
from domain.lifecycle_events import EVENT_OUTCOMES

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)
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
    buckets=LATENCY_BUCKETS,
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
    buckets=LATENCY_BUCKETS,
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


class _Job(Protocol):
    @property
    def id(self) -> str: ...

    @property
    def func(self) -> Callable[[], object]: ...


J = TypeVar("J", bound=_Job)


def instrument_jobs(jobs: Iterable[J]) -> list[J]:
    """The same jobs (dataclasses), each run counted and timed (errors re-raised for
    APScheduler to log)."""
    timed = (dataclasses.replace(job, func=_timed(job.id, job.func)) for job in jobs)  # type: ignore[type-var]
    return list(timed)


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
