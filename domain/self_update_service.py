"""Self-update cycles (SPEC §8.4): system schedules per eligible workspace, idle
materialisation, and the AutonomyGate that keeps at most one self-update task active.

The read side decides *whether to look* (idle? which candidates?); every decision that
matters is re-checked here on aggregates and made exclusive by optimistic concurrency:
the task, its schedule slot and the gate are saved in one transaction.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from uuid import UUID

from eventsourcing.persistence import IntegrityError

from domain.application import Tachograph
from domain.autonomy_gate import AUTONOMY_GATE_ID, AutonomyGate
from domain.autonomy_service import find, retrying
from domain.errors import NotFound
from domain.schedule import Schedule, self_update_schedule_id
from domain.schedule_service import ScheduleService
from domain.task import Task
from domain.task_policy import DEAD_LETTER, FAILED
from domain.task_service import TaskService, utcnow

SELF_UPDATE_PROMPT = (
    "Self-update cycle. Review this workspace for small, safe improvements the agents "
    "working here would benefit from: fix failing or flaky tests, tidy documentation that "
    "drifted from the code, and update agent instructions that recent failures showed to be "
    "wrong. Keep each change minimal and explain it in your final message."
)


@dataclass(frozen=True)
class SelfUpdatePlan:
    """Code-owned fields of every system schedule (refreshed by reconcile)."""

    cron: str = "0 * * * *"
    prompt: str = SELF_UPDATE_PROMPT
    model: str | None = None
    max_attempts: int = 3


@dataclass
class ReconcileResult:
    """Workspaces whose system schedule reconcile created, refreshed, paused or resumed."""

    created: list[str] = field(default_factory=list)
    refreshed: list[str] = field(default_factory=list)
    paused: list[str] = field(default_factory=list)
    resumed: list[str] = field(default_factory=list)
    position: int | None = None

    def note(self, bucket: list[str], workspace: str, position: int | None) -> None:
        if position is not None:
            bucket.append(workspace)
            self.position = max(self.position or 0, position)


class SelfUpdateService:
    """Reconcile system schedules; materialise and release self-update cycles."""

    def __init__(
        self,
        app: Tachograph,
        tasks: TaskService,
        schedules: ScheduleService,
        plan: SelfUpdatePlan,
        *,
        clock: Callable[[], datetime] = utcnow,
    ) -> None:
        self.app = app
        self.tasks = tasks
        self.schedules = schedules
        self.plan = plan
        self.clock = clock

    # Reconcile

    def reconcile(self, workspaces: Iterable[str]) -> ReconcileResult:
        """One system schedule per workspace with selfUpdate on; pause the others' schedules.

        `workspaces` names every workspace to look at (those with a system schedule too).
        Pausing and resuming here is recorded with the actor `system`; a schedule paused
        by a person stays paused.
        """
        result = ReconcileResult()
        for slug in sorted(set(workspaces)):
            try:
                workspace = self.app.get_workspace(slug)
            except NotFound:
                continue
            schedule = self._system_schedule(slug)
            if workspace.self_update:
                recorded = self.schedules.ensure_system_schedule(
                    slug, self.plan.cron, self.plan.prompt, self.plan.model, self.plan.max_attempts
                )
                bucket = result.created if schedule is None else result.refreshed
                result.note(bucket, slug, recorded.position)
                if schedule is not None and schedule.paused and self._paused_by_system(schedule):
                    resumed = self.schedules.update(schedule.id, {}, False, "system")
                    result.note(result.resumed, slug, resumed.position)
            elif schedule is not None and not schedule.paused:
                paused = self.schedules.update(schedule.id, {}, True, "system")
                result.note(result.paused, slug, paused.position)
        return result

    def _system_schedule(self, workspace: str) -> Schedule | None:
        schedule = find(self.app, Schedule, self_update_schedule_id(workspace))
        return None if schedule is None or schedule.deleted else schedule

    def _paused_by_system(self, schedule: Schedule) -> bool:
        """Whether the latest pause was reconcile's own (not an operator's)."""
        for stored in self.app.events.get(schedule.id, desc=True):
            name = type(stored).__name__  # Schedule.Paused / Schedule.Resumed
            if name == "Resumed":
                return False
            if name == "Paused":
                return getattr(stored, "actor", None) == "system"
        return False

    # Cycles

    def gate(self) -> AutonomyGate | None:
        """The gate, once self-update was ever configured."""
        return find(self.app, AutonomyGate, AUTONOMY_GATE_ID)

    def enabled(self) -> bool:
        """Whether self-update is on (the gate mirrors the selfUpdate policy)."""
        gate = self.gate()
        return gate is not None and gate.enabled

    def release_if_settled(self) -> int | None:
        """Release the gate once its task is terminal and can never be requeued."""

        def attempt() -> int | None:
            gate = self.gate()
            if gate is None or gate.task_id is None:
                return None
            status = self._settled(UUID(gate.task_id))
            if status is None:
                return None
            gate.release(UUID(gate.task_id), status, self.clock())
            return self.app.record(gate)

        return retrying(attempt)

    def materialise(self, candidates: Iterable[UUID]) -> UUID | None:
        """Queue one self-update task for the first due, eligible candidate schedule.

        The caller has checked that nothing else is due or active; the gate makes the
        one-active-task rule exact: a concurrent acquire (or a concurrent disable of
        selfUpdate) conflicts and this returns None.
        """
        gate = self.gate()
        if gate is None or not gate.enabled or gate.held:
            return None
        now = self.clock()
        for schedule_id in candidates:
            schedule = self._due_system_schedule(schedule_id, now)
            if schedule is None or schedule.next_run_at is None:
                continue
            task = self.schedules.fire_slot(schedule, schedule.next_run_at, now)
            gate.acquire(task.id, schedule.workspace, now)
            try:
                self.app.record(gate, schedule, task)
            except IntegrityError:
                return None  # another process cycled, or selfUpdate changed, meanwhile
            return task.id
        return None

    def _due_system_schedule(self, schedule_id: UUID, now: datetime) -> Schedule | None:
        schedule = find(self.app, Schedule, schedule_id)
        if schedule is None or schedule.deleted or not schedule.system or not schedule.due(now):
            return None
        try:
            workspace = self.app.get_workspace(schedule.workspace)
        except NotFound:
            return None
        return schedule if workspace.self_update else None

    def _settled(self, task_id: UUID) -> str | None:
        """The final status of a task that can no longer become active, else None.

        A failed task whose remediation is still open may be requeued when the
        remediation completes, so it stays unsettled until the remediation ends. The
        remediation is read before the task: its completion requeues the task in the
        same transaction, so the task read afterwards already shows that.
        """
        task = self.tasks.find(task_id)
        if task is None:
            return "deleted"
        if not task.terminal:
            return None
        if _may_be_requeued(task):
            assert task.remediation_task_id is not None
            remediation = self.tasks.find(UUID(task.remediation_task_id))
            if remediation is not None and not remediation.terminal:
                return None
            task = self.tasks.find(task_id)
            if task is None:
                return "deleted"
            if not task.terminal:
                return None
        return str(task.status)


def _may_be_requeued(task: Task) -> bool:
    return (
        task.status in (FAILED, DEAD_LETTER)
        and task.remediation_task_id is not None
        and task.attempt_count < task.max_attempts
    )
