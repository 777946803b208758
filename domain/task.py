"""Task: one background agent job and its attempts (activity lives in Transcript aggregates)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any
from uuid import UUID, uuid4

from eventsourcing.domain import event

from domain.base import TachographAggregate, declare_event_versions
from domain.errors import Conflict, InvalidState, NotFound, RuleViolation
from domain.ids import stable_id
from domain.task_policy import (
    CANCELLED,
    CANCELLING,
    COMPLETED,
    DEAD_LETTER,
    FAILED,
    QUEUED,
    RESOLUTION_LIMIT_BYTES,
    RESOLVABLE_STATES,
    RUNNING,
    TERMINAL_STATES,
)


class NotDue(Conflict):
    """The task waits for its backoff to pass."""

    code = "not_due"


class StaleAttempt(Conflict):
    """A report about an attempt that is no longer the task's current one."""

    code = "stale_attempt"


def remediation_id(parent_id: UUID) -> UUID:
    """The one remediation task a parent can ever have."""
    return stable_id("remediation", str(parent_id))


def task_session_id(task_id: UUID) -> UUID:
    """The session every attempt of a task reports its hooks into."""
    return stable_id("task-session", str(task_id))


def scheduled_task_id(schedule_id: UUID, due_at: datetime) -> UUID:
    """Task materialised for one schedule slot: every replica derives the same ID."""
    return stable_id("schedule-task", str(schedule_id), due_at.astimezone(UTC).isoformat())


class Task(TachographAggregate):
    """A queued, running or finished agent task; guards run before any state change."""

    TOPIC = "Task"

    @staticmethod
    def create_id(task_id: UUID | None = None, **_: Any) -> UUID:
        return task_id or uuid4()

    @event("Created", topic="Task.Created")
    def __init__(
        self,
        workspace: str,
        prompt: str,
        model: str | None,
        max_attempts: int,
        source: str,
        kind: str,
        schedule_id: str | None,
        parent_task_id: str | None,
        actor: str,
        task_id: UUID | None = None,
    ) -> None:
        self.workspace = workspace
        self.prompt = prompt
        self.model = model
        self.max_attempts = max_attempts
        self.source = source
        self.kind = kind
        self.schedule_id = schedule_id
        self.parent_task_id = parent_task_id
        self.status = QUEUED
        self.attempt_count = 0
        self.next_attempt_at: datetime | None = None
        self.last_error_class: str | None = None
        self.last_error: str | None = None
        self.outcome: str | None = None
        self.resolution: str | None = None
        self.remediation_task_id: str | None = None
        self.turn_id: str | None = None
        self.session_id: str | None = None
        self.worker: str | None = None
        self.interrupted = False
        self.deleted = False
        self.learned: list[dict[str, Any]] | None = None  # what the current attempt carried

    # Queries

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL_STATES

    def is_current(self, attempt: int) -> bool:
        """Whether `attempt` is the attempt in progress (running or being cancelled)."""
        return self.status in (RUNNING, CANCELLING) and attempt == self.attempt_count

    def due(self, now: datetime) -> bool:
        return self.next_attempt_at is None or self.next_attempt_at <= now

    # Commands

    def claim(
        self,
        now: datetime,
        worker: str,
        turn_id: str,
        session_id: UUID,
        learned: list[dict[str, Any]] | None = None,
    ) -> int:
        """Start the next attempt; the saved version bump is what makes a claim exclusive.

        `learned`: the delivery items (SPEC §8) the attempt's prompt carries, or None.
        """
        self._guard_live("claimed")
        if self.status != QUEUED:
            raise InvalidState("Task", self.status, RUNNING)
        if self.attempt_count >= self.max_attempts:
            raise RuleViolation(f"Task {self.id} has used all {self.max_attempts} attempts.")
        if not self.due(now):
            raise NotDue(f"Task {self.id} is not due before {self.next_attempt_at}.")
        attempt = self.attempt_count + 1
        self._claimed(attempt, turn_id, str(session_id), worker, now, learned or None)
        return attempt

    @event("Claimed", topic="Task.Claimed")
    def _claimed(
        self,
        attempt: int,
        turn_id: str,
        session_id: str,
        worker: str,
        at: datetime,
        learned: list[dict[str, Any]] | None,
    ) -> None:
        self.status = RUNNING
        self.attempt_count = attempt
        self.turn_id = turn_id
        self.session_id = session_id
        self.worker = worker
        self.next_attempt_at = None
        self.interrupted = False
        self.learned = learned

    def complete(self, attempt: int, outcome: str | None, at: datetime) -> None:
        """The attempt's process exited 0."""
        self._guard_attempt(attempt, RUNNING, COMPLETED)
        self._completed(attempt, outcome, at)

    @event("Completed", topic="Task.Completed")
    def _completed(self, attempt: int, outcome: str | None, at: datetime) -> None:
        self.status = COMPLETED
        self.outcome = outcome

    def fail(self, attempt: int, error_class: str, error: str, at: datetime) -> None:
        """The attempt failed for good."""
        self._guard_attempt(attempt, RUNNING, FAILED)
        self._failed(attempt, error_class, error, at)

    @event("Failed", topic="Task.Failed")
    def _failed(self, attempt: int, error_class: str, error: str, at: datetime) -> None:
        self.status = FAILED
        self.last_error_class = error_class
        self.last_error = error

    def retry_later(
        self, attempt: int, error_class: str, error: str, next_attempt_at: datetime, at: datetime
    ) -> None:
        """The attempt failed transiently: queue again once the backoff has passed."""
        self._guard_attempt(attempt, RUNNING, QUEUED)
        self._retry_scheduled(attempt, error_class, error, next_attempt_at, at)

    @event("RetryScheduled", topic="Task.RetryScheduled")
    def _retry_scheduled(
        self, attempt: int, error_class: str, error: str, next_attempt_at: datetime, at: datetime
    ) -> None:
        self.status = QUEUED
        self.last_error_class = error_class
        self.last_error = error
        self.next_attempt_at = next_attempt_at

    def dead_letter(self, attempt: int, error_class: str, error: str, at: datetime) -> None:
        """Attempts are exhausted."""
        self._guard_attempt(attempt, RUNNING, DEAD_LETTER)
        self._dead_lettered(attempt, error_class, error, at)

    @event("DeadLettered", topic="Task.DeadLettered")
    def _dead_lettered(self, attempt: int, error_class: str, error: str, at: datetime) -> None:
        self.status = DEAD_LETTER
        self.last_error_class = error_class
        self.last_error = error

    def recover(self, attempt: int, error: str, at: datetime) -> None:
        """Put an attempt whose worker is gone back in the queue."""
        self._guard_attempt(attempt, RUNNING, QUEUED)
        self._requeued(attempt, "infrastructure", error, None, at)

    def requeue_after_remediation(self, remediation_task_id: str, at: datetime) -> None:
        """A completed remediation gives a failed task one more attempt."""
        self._guard_live("requeued")
        if self.status not in (FAILED, DEAD_LETTER):
            raise InvalidState("Task", self.status, QUEUED)
        if self.attempt_count >= self.max_attempts:
            raise RuleViolation(f"Task {self.id} has used all {self.max_attempts} attempts.")
        self._requeued(self.attempt_count, None, None, remediation_task_id, at)

    @event("Requeued", topic="Task.Requeued")
    def _requeued(
        self,
        attempt: int,
        error_class: str | None,
        error: str | None,
        remediation_task_id: str | None,
        at: datetime,
    ) -> None:
        self.status = QUEUED
        self.next_attempt_at = None
        if error_class is not None:
            self.last_error_class = error_class
            self.last_error = error

    def link_remediation(self, remediation_task_id: UUID) -> None:
        """Remember the remediation created for this task's terminal failure."""
        if self.remediation_task_id is None:
            self._remediation_linked(str(remediation_task_id))

    @event("RemediationLinked", topic="Task.RemediationLinked")
    def _remediation_linked(self, remediation_task_id: str) -> None:
        self.remediation_task_id = remediation_task_id

    def cancel(self, actor: str, at: datetime) -> None:
        """Queued → cancelled; running → cancelling; cancelling stays; terminal refuses."""
        self._guard_live("cancelled")
        if self.status == QUEUED:
            self._cancelled(self.attempt_count, actor, at)
        elif self.status == RUNNING:
            self._cancel_requested(self.attempt_count, actor, at)
        elif self.status != CANCELLING:
            raise InvalidState("Task", self.status, CANCELLED)

    @event("CancelRequested", topic="Task.CancelRequested")
    def _cancel_requested(self, attempt: int, actor: str, at: datetime) -> None:
        self.status = CANCELLING

    def settle_cancel(self, attempt: int, at: datetime) -> None:
        """The cancelled attempt's process has been reaped."""
        self._guard_attempt(attempt, CANCELLING, CANCELLED)
        self._cancelled(attempt, "system", at)

    @event("Cancelled", topic="Task.Cancelled")
    def _cancelled(self, attempt: int, actor: str, at: datetime) -> None:
        self.status = CANCELLED
        self.next_attempt_at = None

    def mark_interrupted(self, attempt: int, detail: str, at: datetime) -> None:
        """The attempt's process could not be reaped; it keeps its executor slot."""
        if self.is_current(attempt) and not self.interrupted:
            self._interrupted(attempt, detail, at)

    @event("Interrupted", topic="Task.Interrupted")
    def _interrupted(self, attempt: int, detail: str, at: datetime) -> None:
        self.interrupted = True

    def resolve(self, summary: str, actor: str, at: datetime) -> None:
        """An operator closes a failed, cancelled or dead-lettered task as completed."""
        self._guard_live("resolved")
        if self.status not in RESOLVABLE_STATES:
            raise InvalidState("Task", self.status, COMPLETED)
        if len(summary.encode()) > RESOLUTION_LIMIT_BYTES:
            raise RuleViolation("summary must be at most 2 KiB.")
        self._resolved(summary, actor, at)

    @event("Resolved", topic="Task.Resolved")
    def _resolved(self, summary: str, actor: str, at: datetime) -> None:
        self.status = COMPLETED
        self.resolution = summary
        self.last_error_class = None
        self.last_error = None
        self.next_attempt_at = None

    def delete(self, actor: str) -> None:
        """Remove a finished task from the read models; its events stay in the log."""
        self._guard_live("deleted")
        if not self.terminal:
            raise InvalidState("Task", self.status, "deleted")
        self._deleted(actor)

    @event("Deleted", topic="Task.Deleted")
    def _deleted(self, actor: str) -> None:
        self.deleted = True

    def _guard_live(self, requested: str) -> None:
        if self.deleted:
            raise NotFound(f"Task {self.id} was deleted; it cannot be {requested}.")

    def _guard_attempt(self, attempt: int, expected: str, requested: str) -> None:
        self._guard_live(requested)
        if self.status != expected or attempt != self.attempt_count:
            raise StaleAttempt(
                f"Task {self.id} is {self.status} at attempt {self.attempt_count}; "
                f"attempt {attempt} cannot become {requested}."
            )


def _upcast_claimed_v1_v2(state: dict[str, Any]) -> None:
    # Version 2 records the learned content the attempt's prompt carried; attempts
    # started by earlier releases carried none.
    state["learned"] = None


Task.Claimed.upcast_v1_v2 = staticmethod(_upcast_claimed_v1_v2)  # type: ignore[attr-defined]
declare_event_versions(
    Task,
    Created=1,
    Claimed=2,
    Completed=1,
    Failed=1,
    RetryScheduled=1,
    DeadLettered=1,
    Requeued=1,
    RemediationLinked=1,
    CancelRequested=1,
    Cancelled=1,
    Interrupted=1,
    Resolved=1,
    Deleted=1,
)
