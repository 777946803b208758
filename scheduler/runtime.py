"""APScheduler lifecycle: start and stop are idempotent and serialised."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass

from apscheduler.schedulers.background import BackgroundScheduler
from apscheduler.triggers.base import BaseTrigger

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Job:
    """A thin scheduled entry point."""

    id: str
    func: Callable[[], object]
    trigger: BaseTrigger


class SchedulerRuntime:
    """Owns one BackgroundScheduler; a stop during start prevents any later job run."""

    def __init__(self, jobs: list[Job], timezone: str = "UTC") -> None:
        self.jobs = jobs
        self.timezone = timezone
        self._lock = threading.Lock()
        self._scheduler: BackgroundScheduler | None = None
        self._stopped = False

    @property
    def state(self) -> str:
        """running | stopped."""
        return "running" if self._scheduler is not None else "stopped"

    def start(self) -> None:
        """Start once; a no-op when running or after stop."""
        with self._lock:
            if self._scheduler is not None or self._stopped:
                return
            scheduler = BackgroundScheduler(timezone=self.timezone)
            for job in self.jobs:
                scheduler.add_job(
                    job.func,
                    job.trigger,
                    id=job.id,
                    max_instances=1,
                    coalesce=True,
                    misfire_grace_time=30,
                )
            scheduler.start()
            self._scheduler = scheduler

    def stop(self) -> None:
        """Stop for good and wait for running jobs (idempotent)."""
        with self._lock:
            self._stopped = True
            scheduler, self._scheduler = self._scheduler, None
        if scheduler is not None:
            scheduler.shutdown(wait=True)
