"""Task commands: create, claim, report attempts, cancel, resolve, delete, recover."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol, TypeVar
from uuid import UUID, uuid4

from eventsourcing.application import AggregateNotFoundError
from eventsourcing.domain import Aggregate
from eventsourcing.persistence import IntegrityError

from domain.agent_ids import TASKS_AGENT_ID
from domain.application import Recorded, Tachograph
from domain.dispatch_text import title_hint
from domain.errors import NotFound, RuleViolation
from domain.learned_delivery import NOTHING, Composed
from domain.redaction import redact_bounded
from domain.session import Session
from domain.task import StaleAttempt, Task, remediation_id, task_session_id
from domain.task_policy import (
    CANCELLING,
    COMPLETED,
    DEAD_LETTER,
    ERROR_LIMIT_BYTES,
    FAILED,
    KIND_REMEDIATION,
    KIND_TASK,
    QUEUED,
    RECORD_LIMIT_BYTES,
    SOURCE_SELF_UPDATE,
    SOURCE_SYSTEM,
    SOURCE_USER,
    Backoff,
    after_failure,
    remediation_prompt,
)
from domain.transcript import Transcript, transcript_id

T = TypeVar("T")
MAX_PROMPT_BYTES = 256 * 1024
_CONFLICT_RETRIES = 5
# Between the learned preamble and the task's own prompt: the agent reads where the
# guidance ends and its task begins.
PREAMBLE_SEPARATOR = "\n\n---\n\n"
LEARNED_BUDGET_BYTES = 16 * 1024
# The prompt reaches the agent as one argument, and Linux refuses an argument over
# 128 KiB (MAX_ARG_STRLEN) with E2BIG: the preamble only takes room the prompt leaves,
# minus a margin for the text a template puts around `{prompt}` in the same argument.
ARGUMENT_LIMIT_BYTES = 128 * 1024 - 1
ARGUMENT_MARGIN_BYTES = 1024

log = logging.getLogger(__name__)


def utcnow() -> datetime:
    return datetime.now(UTC)


class LearnedSource(Protocol):
    """An agent's learned content, composed and bounded, answered from memory."""

    def for_agent(
        self, agent_id: str, budget_bytes: int = ..., workspace_id: str | None = ...
    ) -> Composed: ...


@dataclass(frozen=True)
class Claim:
    """A won claim: everything an executor needs to run the attempt."""

    task_id: UUID
    attempt: int
    turn_id: str
    session_id: UUID
    workspace: str
    prompt: str  # what the agent is handed: the learned preamble, if any, then the task's
    model: str | None
    transcript: Transcript
    position: int | None
    learned: tuple[dict[str, Any], ...] = ()  # the delivery items the prompt carries


def learned_budget(prompt: str) -> int:
    """Bytes the learned preamble of `prompt` may take (16 KiB, less for a long prompt)."""
    room = (
        ARGUMENT_LIMIT_BYTES
        - ARGUMENT_MARGIN_BYTES
        - len(prompt.encode())
        - len(PREAMBLE_SEPARATOR.encode())
    )
    return max(0, min(LEARNED_BUDGET_BYTES, room))


def with_preamble(learned: str | None, prompt: str) -> str:
    """The task's prompt behind the learned text it carries (unchanged without one)."""
    return f"{learned}{PREAMBLE_SEPARATOR}{prompt}" if learned else prompt


class TaskService:
    """Command side of tasks; every cross-process invariant rests on optimistic concurrency."""

    def __init__(
        self,
        app: Tachograph,
        *,
        clock: Callable[[], datetime] = utcnow,
        backoff: Backoff | None = None,
        learned: LearnedSource | None = None,
    ) -> None:
        self.app = app
        self.clock = clock
        self.backoff = backoff or Backoff()
        self.learned = learned

    # Queries

    def get(self, task_id: UUID) -> Task:
        """A live task, or NotFound (deleted tasks are gone)."""
        task = self.app.load(Task, task_id, "Task")
        if task.deleted:
            raise NotFound(f"Task {task_id} was deleted.")
        return task

    def find(self, task_id: UUID) -> Task | None:
        """The task, or None when it does not exist or was deleted."""
        try:
            return self.get(task_id)
        except NotFound:
            return None

    def transcript(self, task_id: UUID, attempt: int) -> Transcript | None:
        """The transcript of one attempt, if it was started."""
        try:
            found: object = self.app.repository.get(transcript_id(task_id, attempt))
        except AggregateNotFoundError:
            return None
        return found if isinstance(found, Transcript) else None

    def self_update_work(self, task: Task) -> bool:
        """Self-update work, or the remediation of it: it changes Tachograph itself."""
        if task.source == SOURCE_SELF_UPDATE:
            return True
        parent = self.find(UUID(task.parent_task_id)) if task.parent_task_id else None
        return parent is not None and parent.source == SOURCE_SELF_UPDATE

    def learned_for(self, task: Task) -> Composed:
        """The learned content an attempt of `task` carries now (NOTHING when none).

        Self-update prompts carry it only where the workspace opted in. Learning is
        never a reason for an attempt not to start: a failure here carries nothing.
        """
        if self.learned is None:
            return NOTHING
        try:
            if (
                self.self_update_work(task)
                and not self.app.get_workspace(task.workspace).learned_in_self_update
            ):
                return NOTHING
            return self.learned.for_agent(
                TASKS_AGENT_ID, learned_budget(task.prompt), task.workspace
            )
        except Exception:  # noqa: BLE001 - the attempt runs without the preamble instead
            log.exception("composing learned content failed", extra={"task_id": task.id})
            return NOTHING

    # Commands from clients

    def create(
        self,
        workspace: str,
        prompt: str,
        model: str | None,
        max_attempts: int,
        actor: str,
        *,
        source: str = SOURCE_USER,
        schedule_id: UUID | None = None,
        task_id: UUID | None = None,
    ) -> Recorded:
        """Queue a task in an existing workspace."""
        self.app.get_workspace(workspace)
        task = new_task(workspace, prompt, model, max_attempts, actor, source, schedule_id, task_id)
        return Recorded(task.id, self.app.record(task))

    def cancel(self, task_id: UUID, actor: str) -> Recorded:
        """Queued → cancelled; running → cancelling (the executor settles it)."""
        return self._retrying(
            lambda: self._save_one(task_id, lambda t: t.cancel(actor, self.clock()))
        )

    def resolve(self, task_id: UUID, summary: str, actor: str) -> Recorded:
        """Close a failed, cancelled or dead-lettered task as completed."""
        return self._retrying(
            lambda: self._save_one(task_id, lambda t: t.resolve(summary, actor, self.clock()))
        )

    def delete(self, task_id: UUID, actor: str) -> Recorded:
        """Delete a terminal task from the read models."""
        return self._retrying(lambda: self._save_one(task_id, lambda t: t.delete(actor)))

    # Commands from executors

    def claim(self, task_id: UUID, worker: str) -> Claim | None:
        """Start the next attempt, or None when it is not claimable or another worker won."""
        task = self.find(task_id)
        if task is None or task.status != QUEUED or not task.due(self.clock()):
            return None
        turn_id = str(uuid4())
        session_id = task_session_id(task.id)
        # Composed before the claim is saved: the Claimed event records exactly what this
        # prompt carries, so a revert either precedes the attempt or is not in its prompt.
        learned = self.learned_for(task)
        attempt = task.claim(self.clock(), worker, turn_id, session_id, list(learned.items))
        transcript = Transcript(task_id=task.id, attempt=attempt, turn_id=turn_id)
        # The first claim creates the task's session in the same transaction, so it
        # exists exactly when attemptCount > 0.
        extra: list[Aggregate] = []
        if attempt == 1:
            title = f"Task: {title_hint(task.prompt) or ''}"[:80]  # redacted, as every title
            extra.append(
                Session(
                    workspace=task.workspace,
                    title=title,
                    agent="tachograph-task",
                    agent_session_id=str(task.id),
                    actor="system",
                    session_id=session_id,
                )
            )
        try:
            position = self.app.record(task, transcript, *extra)
        except IntegrityError:
            return None  # another worker saved first: it won this attempt
        return Claim(
            task.id,
            attempt,
            turn_id,
            session_id,
            task.workspace,
            with_preamble(learned.text, task.prompt),
            task.model,
            transcript,
            position,
            learned.items,
        )

    def append_activity(self, transcript: Transcript, records: list[dict[str, Any]]) -> int | None:
        """Append one throttled batch of activity to an attempt's transcript."""
        transcript.append(records, self.clock())
        return self.app.record(transcript)

    def complete(self, task_id: UUID, attempt: int, outcome: str | None) -> Recorded:
        """The attempt exited 0 (a cancelling task becomes cancelled instead)."""
        if outcome is not None:
            outcome = redact_bounded(outcome, RECORD_LIMIT_BYTES)  # the agent's last text

        def change(task: Task, now: datetime) -> None:
            if task.status == CANCELLING:
                task.settle_cancel(attempt, now)
            else:
                task.complete(attempt, outcome, now)

        return self._finish(task_id, attempt, change)

    def fail(self, task_id: UUID, attempt: int, error_class: str, error: str) -> Recorded:
        """The attempt failed: retry with backoff, dead-letter or fail, by policy."""
        error = redact_bounded(error, ERROR_LIMIT_BYTES)

        def change(task: Task, now: datetime) -> None:
            if task.status == CANCELLING:
                task.settle_cancel(attempt, now)
                return
            decision = after_failure(
                task.source, error_class, task.attempt_count, task.max_attempts
            )
            if decision == "retry":
                task.retry_later(
                    attempt, error_class, error, now + self.backoff.delay(attempt), now
                )
            elif decision == "dead-letter":
                task.dead_letter(attempt, error_class, error, now)
            else:
                task.fail(attempt, error_class, error, now)

        return self._finish(task_id, attempt, change)

    def cancelled(self, task_id: UUID, attempt: int) -> Recorded:
        """The cancelled attempt's process has been reaped."""
        return self._finish(task_id, attempt, lambda task, now: task.settle_cancel(attempt, now))

    def recover(self, task_id: UUID, attempt: int, worker: str | None, reason: str) -> Recorded:
        """Restart recovery of an attempt whose worker is gone (or shut down).

        Cancelling work becomes cancelled; running work below maxAttempts is requeued,
        exhausted work is dead-lettered. `worker` (when given) must still own the attempt.
        """

        def change(task: Task, now: datetime) -> None:
            if worker is not None and task.worker != worker:
                raise StaleAttempt(f"Task {task.id} attempt {attempt} belongs to another worker.")
            if task.status == CANCELLING:
                task.settle_cancel(attempt, now)
            elif task.attempt_count < task.max_attempts:
                task.recover(attempt, reason, now)
            else:
                task.dead_letter(attempt, "infrastructure", reason, now)

        return self._finish(task_id, attempt, change)

    def mark_interrupted(self, task_id: UUID, attempt: int, detail: str) -> Recorded:
        """Report an attempt whose process cannot be reaped (it keeps its slot)."""
        return self._finish(
            task_id, attempt, lambda task, now: task.mark_interrupted(attempt, detail, now)
        )

    def ensure_remediation(self, task_id: UUID) -> Recorded:
        """Create the remediation of a terminally failed task if it has none (idempotent)."""

        def attempt_once() -> Recorded:
            task = self.get(task_id)
            extra = self._remediation(task)
            return Recorded(task.id, self.app.record(task, *extra) if extra else None)

        return self._retrying(attempt_once)

    # Internals

    def _finish(
        self, task_id: UUID, attempt: int, change: Callable[[Task, datetime], None]
    ) -> Recorded:
        """Apply an executor report; a stale one (already settled elsewhere) is a no-op."""

        def attempt_once() -> Recorded:
            task = self.get(task_id)
            try:
                change(task, self.clock())
            except StaleAttempt:
                return Recorded(task.id, None)
            extra = self._after_terminal(task)
            return Recorded(task.id, self.app.record(task, *extra))

        return self._retrying(attempt_once)

    def _after_terminal(self, task: Task) -> list[Aggregate]:
        """Follow-ups saved with a terminal state: remediation, or requeueing a parent."""
        if task.status in (FAILED, DEAD_LETTER):
            return self._remediation(task)
        if task.kind == KIND_REMEDIATION and task.status == COMPLETED and task.parent_task_id:
            parent = self.find(UUID(task.parent_task_id))
            if (
                parent is not None
                and parent.status in (FAILED, DEAD_LETTER)
                and parent.attempt_count < parent.max_attempts
            ):
                parent.requeue_after_remediation(str(task.id), self.clock())
                return [parent]
        return []

    def _remediation(self, task: Task) -> list[Aggregate]:
        """One remediation per parent (ID from the parent); remediation never remediates."""
        if task.kind != KIND_TASK or task.status not in (FAILED, DEAD_LETTER):
            return []
        if task.remediation_task_id is not None:
            return []
        rid = remediation_id(task.id)
        task.link_remediation(rid)
        if self.find(rid) is not None:
            return []  # created earlier; only the link was missing
        transcript = self.transcript(task.id, task.attempt_count)
        prompt = remediation_prompt(
            str(task.id),
            task.prompt,
            task.status,
            task.attempt_count,
            task.last_error_class,
            task.last_error,
            list(transcript.tail) if transcript else [],
        )
        remediation = Task(
            workspace=task.workspace,
            prompt=prompt,
            model=task.model,
            max_attempts=task.max_attempts,
            source=SOURCE_SYSTEM,
            kind=KIND_REMEDIATION,
            schedule_id=None,
            parent_task_id=str(task.id),
            actor="system",
            task_id=rid,
        )
        return [remediation]

    def _save_one(self, task_id: UUID, change: Callable[[Task], None]) -> Recorded:
        task = self.get(task_id)
        change(task)
        return Recorded(task.id, self.app.record(task))

    def _retrying(self, command: Callable[[], Recorded]) -> Recorded:
        """Run a load-change-save command again when a concurrent save won the version."""
        for _ in range(_CONFLICT_RETRIES - 1):
            try:
                return command()
            except IntegrityError:
                continue
        return command()


def new_task(
    workspace: str,
    prompt: str,
    model: str | None,
    max_attempts: int,
    actor: str,
    source: str,
    schedule_id: UUID | None,
    task_id: UUID | None,
) -> Task:
    """A validated new task aggregate (not yet saved)."""
    if not prompt.strip():
        raise RuleViolation("prompt must not be empty.")
    if len(prompt.encode()) > MAX_PROMPT_BYTES:
        raise RuleViolation("prompt must be at most 256 KiB.")
    if not 1 <= max_attempts <= 10:
        raise RuleViolation("maxAttempts must be between 1 and 10.")
    return Task(
        workspace=workspace,
        prompt=prompt,
        model=model,
        max_attempts=max_attempts,
        source=source,
        kind=KIND_TASK,
        schedule_id=str(schedule_id) if schedule_id else None,
        parent_task_id=None,
        actor=actor,
        task_id=task_id,
    )
