"""Schedule commands and materialisation; fire times come from a function the caller passes."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

from eventsourcing.persistence import IntegrityError

from domain.application import Recorded, Tachograph
from domain.errors import NotFound
from domain.schedule import Schedule, self_update_schedule_id
from domain.task import Task, scheduled_task_id
from domain.task_policy import SOURCE_SCHEDULE, SOURCE_SELF_UPDATE
from domain.task_service import new_task, utcnow

# Given an instant, the schedule's first fire time strictly after it (None: never again).
NextFire = Callable[[datetime], datetime | None]
# Validates a cron expression (raising a RuleViolation) and returns its fire times.
FireTimes = Callable[[str], NextFire]

_TINY = timedelta(microseconds=1)


class ScheduleService:
    """Command side of schedules; cron evaluation is injected (it needs APScheduler)."""

    def __init__(
        self, app: Tachograph, fire_times: FireTimes, *, clock: Callable[[], datetime] = utcnow
    ) -> None:
        self.app = app
        self.fire_times = fire_times
        self.clock = clock

    def get(self, schedule_id: UUID) -> Schedule:
        """A live schedule, or NotFound."""
        schedule = self.app.load(Schedule, schedule_id, "Schedule")
        if schedule.deleted:
            raise NotFound(f"Schedule {schedule_id} was deleted.")
        return schedule

    def create(
        self,
        workspace: str,
        name: str,
        cron: str,
        prompt: str,
        model: str | None,
        max_attempts: int,
        actor: str,
    ) -> Recorded:
        """A user schedule, first due at the cron's next fire time."""
        next_fire = self.fire_times(cron)
        self.app.get_workspace(workspace)
        new_task(workspace, prompt, model, max_attempts, actor, SOURCE_SCHEDULE, None, None)
        schedule = Schedule(
            workspace=workspace,
            source="user",
            name=name,
            cron=cron,
            prompt=prompt,
            model=model,
            max_attempts=max_attempts,
            next_run_at=self._next(next_fire),
            actor=actor,
        )
        return Recorded(schedule.id, self.app.record(schedule))

    def update(
        self,
        schedule_id: UUID,
        changes: dict[str, Any],
        paused: bool | None,
        actor: str,
        *,
        owner: str = "user",
    ) -> Recorded:
        """Edit fields and/or pause or resume (resuming restarts from the next fire time)."""
        schedule = self.get(schedule_id)
        next_fire = self.fire_times(changes.get("cron", schedule.cron))
        if "prompt" in changes or "max_attempts" in changes:
            new_task(
                schedule.workspace,
                changes.get("prompt", schedule.prompt),
                changes.get("model", schedule.model),
                changes.get("max_attempts", schedule.max_attempts),
                actor,
                SOURCE_SCHEDULE,
                None,
                None,
            )
        if paused is True:
            schedule.pause(actor)
        if changes:
            cron_changed = changes.get("cron", schedule.cron) != schedule.cron
            next_run_at = self._next(next_fire) if cron_changed else schedule.next_run_at
            schedule.update(changes, next_run_at, actor, owner=owner)
        if paused is False:
            schedule.resume(self._next(next_fire), actor)
        return Recorded(schedule.id, self.app.record(schedule))

    def delete(self, schedule_id: UUID, actor: str) -> Recorded:
        """Delete a user schedule; queued tasks it made stay."""
        schedule = self.get(schedule_id)
        schedule.delete(actor)
        return Recorded(schedule.id, self.app.record(schedule))

    def ensure_system_schedule(
        self,
        workspace: str,
        cron: str,
        prompt: str,
        model: str | None,
        max_attempts: int,
    ) -> Recorded:
        """Create or refresh a workspace's self-update schedule (code-owned fields)."""
        next_fire = self.fire_times(cron)
        schedule_id = self_update_schedule_id(workspace)
        try:
            schedule = self.get(schedule_id)
        except NotFound:
            schedule = Schedule(
                workspace=workspace,
                source=SOURCE_SELF_UPDATE,
                name=f"self-update {workspace}",
                cron=cron,
                prompt=prompt,
                model=model,
                max_attempts=max_attempts,
                next_run_at=self._next(next_fire),
                actor="system",
                schedule_id=schedule_id,
            )
            try:
                return Recorded(schedule.id, self.app.record(schedule))
            except IntegrityError:
                schedule = self.get(schedule_id)  # created concurrently: refresh it instead
        changes = {"cron": cron, "prompt": prompt, "model": model, "max_attempts": max_attempts}
        next_run_at = self._next(next_fire) if cron != schedule.cron else schedule.next_run_at
        schedule.update(changes, next_run_at, "system", owner="system")
        return Recorded(schedule.id, self.app.record(schedule))

    def materialise(self, schedule_id: UUID) -> UUID | None:
        """Queue the task of the due slot once, whatever the number of replicas.

        The task ID derives from (scheduleId, dueTime) and the schedule's version is
        bumped in the same transaction: a concurrent materialiser conflicts and gets None.
        Missed slots are coalesced: the next run is the first fire time after now.
        """
        now = self.clock()
        try:
            schedule = self.get(schedule_id)
        except NotFound:
            return None
        if not schedule.due(now) or schedule.next_run_at is None:
            return None
        task = self.fire_slot(schedule, schedule.next_run_at, now)
        try:
            self.app.record(schedule, task)
        except IntegrityError:
            return None  # another replica materialised this slot
        return task.id

    def fire_slot(self, schedule: Schedule, due_at: datetime, now: datetime) -> Task:
        """The task of one due slot (ID from scheduleId and dueTime); marks the slot fired."""
        task_id = scheduled_task_id(schedule.id, due_at)
        task = new_task(
            schedule.workspace,
            schedule.prompt,
            schedule.model,
            schedule.max_attempts,
            "system",
            SOURCE_SELF_UPDATE if schedule.system else SOURCE_SCHEDULE,
            schedule.id,
            task_id,
        )
        schedule.fire(due_at, task_id, self.fire_times(schedule.cron)(max(due_at, now)))
        return task

    def _next(self, next_fire: NextFire) -> datetime | None:
        # Strictly after now minus a hair, so a slot at exactly "now" still counts.
        return next_fire(self.clock() - _TINY)
