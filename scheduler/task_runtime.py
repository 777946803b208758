"""The worker's task jobs in one process: the services, the executor when a task command
is set, and the scheduled entry points (poll, schedules, heartbeat, maintenance,
restart recovery). The executor itself, which runs one attempt, is scheduler/tasks.py.

Jobs stay thin: they call the domain services (which enforce every invariant through
optimistic concurrency) and the command runner (which owns the process).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from uuid import UUID

from apscheduler.triggers.cron import CronTrigger
from apscheduler.triggers.interval import IntervalTrigger

from domain.application import Tachograph
from domain.lifecycle import LifecycleEvent
from domain.schedule_service import ScheduleService
from domain.self_update_cycle import CycleRecorder
from domain.task import Task
from domain.task_policy import CANCELLING, RUNNING
from domain.task_service import LearnedSource, TaskService, utcnow
from infra.event_store import schema_lock
from infra.executor import CommandRunner
from infra.settings import Settings
from projections.schedules import due_user_schedule_ids
from projections.store import ReadStore
from projections.tasks import active_task_ids
from scheduler.attempt_tokens import AttemptTokens
from scheduler.cron import cron_fire_times
from scheduler.liveness import WorkerRegistry
from scheduler.runtime import Job
from scheduler.self_update_cycle import remove_unrecorded_ref
from scheduler.tasks import TaskExecutor, TaskHooks

log = logging.getLogger(__name__)

RECOVERY_INTERVAL_S = 30.0
HEARTBEAT_INTERVAL_S = 5.0


class TaskRuntime:
    """Everything tasks and schedules need in one process: services, executor, jobs."""

    def __init__(
        self,
        settings: Settings,
        app: Tachograph,
        store: ReadStore,
        hooks: TaskHooks | None,
        *,
        clock: Callable[[], datetime] = utcnow,
        tokens: AttemptTokens | None = None,
        learned: LearnedSource | None = None,
    ) -> None:
        self.settings = settings
        self.tokens = tokens
        self.app = app
        self.store = store
        self.hooks = hooks
        # Every attempt's prompt starts with the `tasks` agent's learned content (SPEC §8).
        self.service = TaskService(app, clock=clock, learned=learned)
        self.schedules = ScheduleService(app, cron_fire_times(settings.timezone), clock=clock)
        self.registry = WorkerRegistry(
            store, executor_slots=settings.task_concurrency if settings.task_command else 0
        )
        self.executor: TaskExecutor | None = None
        if settings.task_command:
            runner = CommandRunner(
                timeout_s=settings.task_timeout_s, grace_s=settings.task_kill_grace_s
            )
            self.executor = TaskExecutor(
                settings,
                app,
                store,
                self.service,
                runner,
                hooks,
                self.registry.worker_id,
                tokens,
            )
        self._recovered_at: float | None = None
        self._lock = threading.Lock()

    @property
    def worker_id(self) -> str:
        return self.registry.worker_id

    def jobs(self) -> list[Job]:
        """Thin scheduled entry points."""
        poll = self.settings.task_poll_interval_s
        return [
            Job("tasks.poll", self.tick, IntervalTrigger(seconds=poll)),
            Job("schedules.materialise", self.materialise_due, IntervalTrigger(seconds=poll)),
            Job(
                "tasks.heartbeat", self.registry.beat, IntervalTrigger(seconds=HEARTBEAT_INTERVAL_S)
            ),
            Job(
                "tasks.maintenance",
                self.registry.prune,
                CronTrigger(hour=3, minute=17, timezone=self.settings.timezone),
            ),
        ]

    def tick(self) -> None:
        """Heartbeat and recovery first (at start, then periodically), then claim work."""
        now = time.monotonic()
        if self._recovered_at is None or now - self._recovered_at >= RECOVERY_INTERVAL_S:
            if self._recovered_at is None:
                self.registry.beat()
            self.recover()
            self._recovered_at = now
        if self.executor is not None:
            self.executor.poll()

    def recover(self) -> int:
        """Settle running/cancelling attempts whose worker is gone (SPEC §7.3)."""
        recovered = 0
        for task_id in active_task_ids(self.store):
            task = self.service.find(UUID(task_id))
            if task is None or task.status not in (RUNNING, CANCELLING):
                continue
            if task.worker == self.worker_id or not self.registry.is_gone(task.worker):
                continue
            reason = f"worker {task.worker} stopped during attempt {task.attempt_count}"
            recorded = self.service.recover(task.id, task.attempt_count, task.worker, reason)
            if recorded.position is None:
                continue
            recovered += 1
            log.warning("recovered task: %s", reason, extra={"task_id": task.id})
            self._forget_unlanded_import(task)
            if self.tokens is not None:
                try:  # the lost attempt's agent may outlive its worker: refuse its token
                    self.tokens.revoke(task.id, task.attempt_count, reason)
                except Exception as exc:  # noqa: BLE001 - it still expires at its deadline
                    log.warning("revoking a recovered attempt's token failed: %s", exc)
            if self.hooks is not None and task.session_id and task.turn_id:
                ev = LifecycleEvent(
                    event="TaskStop",
                    event_id=f"{task.turn_id}:TaskStop",
                    turn_id=task.turn_id,
                    agent="tachograph-task",
                    detail={
                        "taskId": str(task.id),
                        "attempt": task.attempt_count,
                        "recovered": True,
                    },
                )
                try:
                    self.hooks(UUID(task.session_id), ev, actor="system")
                except Exception as exc:  # noqa: BLE001 - observational
                    log.warning("TaskStop hook failed: %s", exc)
        return recovered

    def _forget_unlanded_import(self, task: Task) -> None:
        """A contained attempt killed mid-import may have left its ref, which never landed
        (no commit phase recorded it): delete it, whether or not another attempt follows."""
        if self.executor is None or not self.executor.contained(task):
            return
        try:
            workspace = self.app.get_workspace(task.workspace)
            checkout = Path(self.settings.workspace_root, workspace.path).resolve()
            removed = remove_unrecorded_ref(CycleRecorder(self.app), checkout, task.id)
        except Exception as exc:  # noqa: BLE001 - the next attempt's prepare checks again
            log.warning("checking a recovered cycle's ref failed: %s", exc)
            return
        if removed is not None:
            log.warning(
                "removed %s (%s): no commit phase recorded it",
                removed["ref"],
                removed["commit"],
                extra={"task_id": task.id},
            )

    def materialise_due(self) -> list[UUID]:
        """Queue the tasks of due user schedules (once per slot across replicas)."""
        created = []
        for schedule_id in due_user_schedule_ids(self.store, self.service.clock()):
            try:
                task_id = self.schedules.materialise(UUID(schedule_id))
            except Exception as exc:  # noqa: BLE001 - one bad schedule must not block others
                log.warning("materialising schedule %s failed: %s", schedule_id, exc)
                continue
            if task_id is not None:
                created.append(task_id)
        return created

    def shutdown(self) -> None:
        """Stop attempts (recording them), then withdraw this worker's heartbeat."""
        with self._lock:
            if self.executor is not None:
                self.executor.shutdown()
            try:
                self.registry.forget()
            except Exception as exc:  # noqa: BLE001 - stale rows expire by themselves
                log.warning("could not remove worker heartbeat: %s", exc)


def build_task_runtime(
    settings: Settings,
    app: Tachograph,
    store: ReadStore,
    hooks: TaskHooks | None,
    tokens: AttemptTokens | None = None,
    learned: LearnedSource | None = None,
) -> TaskRuntime:
    """Create the runtime and its worker table (under the schema lock, like every DDL)."""
    runtime = TaskRuntime(settings, app, store, hooks, tokens=tokens, learned=learned)
    with schema_lock(settings):
        runtime.registry.ensure_schema()
    return runtime
