"""Schedule: a cron rule that materialises tasks; fire times are computed outside the domain."""

from __future__ import annotations

from datetime import datetime
from typing import Any
from uuid import UUID, uuid4

from eventsourcing.domain import event

from domain.base import TachographAggregate, declare_event_versions
from domain.errors import Conflict, NotFound
from domain.ids import stable_id

USER_FIELDS = ("name", "cron", "prompt", "model", "max_attempts")


class SystemSchedule(Conflict):
    """A code-owned (self-update) schedule only accepts pausing."""

    code = "system_schedule"


def self_update_schedule_id(workspace: str) -> UUID:
    """The one system schedule of a workspace."""
    return stable_id("self-update-schedule", workspace)


class Schedule(TachographAggregate):
    """A user schedule or a system (self-update) schedule of one workspace."""

    TOPIC = "Schedule"

    @staticmethod
    def create_id(schedule_id: UUID | None = None, **_: Any) -> UUID:
        return schedule_id or uuid4()

    @event("Created", topic="Schedule.Created")
    def __init__(
        self,
        workspace: str,
        source: str,
        name: str,
        cron: str,
        prompt: str,
        model: str | None,
        max_attempts: int,
        next_run_at: datetime | None,
        actor: str,
        schedule_id: UUID | None = None,
    ) -> None:
        self.workspace = workspace
        self.source = source
        self.name = name
        self.cron = cron
        self.prompt = prompt
        self.model = model
        self.max_attempts = max_attempts
        self.paused = False
        self.next_run_at = next_run_at
        self.last_run_at: datetime | None = None
        self.last_task_id: str | None = None
        self.deleted = False

    @property
    def system(self) -> bool:
        return self.source != "user"

    def due(self, now: datetime) -> bool:
        return not self.paused and self.next_run_at is not None and self.next_run_at <= now

    def update(
        self, changes: dict[str, Any], next_run_at: datetime | None, actor: str, *, owner: str
    ) -> None:
        """Change rule fields; only the code (`owner="system"`) may edit a system schedule."""
        self._guard_live("updated")
        unknown = set(changes) - set(USER_FIELDS)
        if unknown:
            raise ValueError(f"not schedule fields: {sorted(unknown)}")
        if self.system and owner != "system":
            raise SystemSchedule(
                f"Schedule {self.id} is managed by self-update; only 'paused' can be changed."
            )
        effective = {k: v for k, v in changes.items() if getattr(self, k) != v}
        if not effective:
            return
        if self.paused:
            next_run_at = None  # a paused schedule has no next run until resumed
        self._updated(effective, next_run_at, actor)

    @event("Updated", topic="Schedule.Updated")
    def _updated(self, changes: dict[str, Any], next_run_at: datetime | None, actor: str) -> None:
        for key, value in changes.items():
            setattr(self, key, value)
        self.next_run_at = next_run_at

    def pause(self, actor: str) -> None:
        """Stop materialising (idempotent)."""
        self._guard_live("paused")
        if not self.paused:
            self._paused(actor)

    @event("Paused", topic="Schedule.Paused")
    def _paused(self, actor: str) -> None:
        self.paused = True
        self.next_run_at = None

    def resume(self, next_run_at: datetime | None, actor: str) -> None:
        """Materialise again from the next fire time after now (idempotent)."""
        self._guard_live("resumed")
        if self.paused:
            self._resumed(next_run_at, actor)

    @event("Resumed", topic="Schedule.Resumed")
    def _resumed(self, next_run_at: datetime | None, actor: str) -> None:
        self.paused = False
        self.next_run_at = next_run_at

    def fire(self, due_at: datetime, task_id: UUID, next_run_at: datetime | None) -> None:
        """Record the materialisation of the slot at `due_at`."""
        self._guard_live("fired")
        if self.next_run_at != due_at:
            raise Conflict(f"Schedule {self.id} has no slot due at {due_at.isoformat()}.")
        self._fired(due_at, str(task_id), next_run_at)

    @event("Fired", topic="Schedule.Fired")
    def _fired(self, due_at: datetime, task_id: str, next_run_at: datetime | None) -> None:
        self.last_run_at = due_at
        self.last_task_id = task_id
        self.next_run_at = next_run_at

    def delete(self, actor: str) -> None:
        """Remove a user schedule (system schedules are paused instead)."""
        self._guard_live("deleted")
        if self.system:
            raise SystemSchedule(
                f"Schedule {self.id} is managed by self-update and cannot be deleted; pause it."
            )
        self._deleted(actor)

    @event("Deleted", topic="Schedule.Deleted")
    def _deleted(self, actor: str) -> None:
        self.deleted = True

    def _guard_live(self, requested: str) -> None:
        if self.deleted:
            raise NotFound(f"Schedule {self.id} was deleted; it cannot be {requested}.")


declare_event_versions(Schedule, Created=1, Updated=1, Paused=1, Resumed=1, Fired=1, Deleted=1)
