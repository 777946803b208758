"""Task lifecycle through the command side, on both stores (SPEC §7.1)."""

from __future__ import annotations

import threading
from datetime import timedelta
from uuid import UUID

import pytest
from eventsourcing.domain import Aggregate

from bootstrap import Services
from domain.base import TachographAggregate
from domain.errors import InvalidState, NotFound, RuleViolation
from domain.session import Session
from domain.task import Task, remediation_id, task_session_id
from domain.task_policy import Backoff
from domain.task_service import Claim, TaskService
from domain.transcript import Transcript, transcript_id
from infra.event_store import open_application
from tests.tasks.conftest import Clock

WORKER = "host:1:test"


@pytest.fixture
def tasks(services: Services, clock: Clock) -> TaskService:
    return TaskService(services.app, clock=clock, backoff=Backoff(base_s=30, cap_s=120))


def new_task(tasks: TaskService, *, source: str = "user", max_attempts: int = 3) -> UUID:
    return tasks.create(
        "default", "Fix the build", "m1", max_attempts, "alice", source=source
    ).aggregate_id


def claimed(tasks: TaskService, task_id: UUID) -> Claim:
    claim = tasks.claim(task_id, WORKER)
    assert claim is not None
    return claim


def test_claim_starts_an_attempt_with_its_turn_session_and_transcript(tasks: TaskService) -> None:
    task_id = new_task(tasks)
    claim = claimed(tasks, task_id)
    task = tasks.get(task_id)
    assert (task.status, task.attempt_count, task.worker) == ("running", 1, WORKER)
    assert claim.attempt == 1 and claim.turn_id == task.turn_id
    assert claim.session_id == task_session_id(task_id)
    session: Aggregate = tasks.app.repository.get(claim.session_id)
    assert isinstance(session, Session) and session.agent == "tachograph-task"
    assert tasks.app.repository.get(transcript_id(task_id, 1)).turn_id == claim.turn_id
    assert tasks.claim(task_id, "other") is None  # running: nothing to claim


def test_two_claimers_racing_exactly_one_wins(services: Services, tasks: TaskService) -> None:
    task_id = new_task(tasks)
    barrier = threading.Barrier(2)

    class Racing(TaskService):
        def find(self, task_id: UUID) -> Task | None:
            task = super().find(task_id)
            barrier.wait(5)  # both have loaded the same version before either saves
            return task

    second_app = open_application(services.settings)
    try:
        claimers = [Racing(services.app), Racing(second_app)]
        results: list[Claim | None] = [None, None]

        def claim(i: int) -> None:
            results[i] = claimers[i].claim(task_id, f"worker-{i}")

        threads = [threading.Thread(target=claim, args=(i,)) for i in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        second_app.close()
    assert sum(r is not None for r in results) == 1
    task = tasks.get(task_id)
    assert task.attempt_count == 1
    winner = next(r for r in results if r is not None)
    assert task.turn_id == winner.turn_id


def test_completion_records_the_outcome(tasks: TaskService) -> None:
    task_id = new_task(tasks)
    claim = claimed(tasks, task_id)
    assert tasks.complete(task_id, claim.attempt, "done").position is not None
    task = tasks.get(task_id)
    assert (task.status, task.outcome, task.remediation_task_id) == ("completed", "done", None)


def test_user_task_fails_without_retry_and_gets_one_remediation(tasks: TaskService) -> None:
    task_id = new_task(tasks)
    claim = claimed(tasks, task_id)
    tasks.append_activity(claim.transcript, [{"kind": "text", "text": "trying npm test"}])
    tasks.fail(task_id, claim.attempt, "provider", "exit code 1: 429 rate limit")
    task = tasks.get(task_id)
    assert (task.status, task.last_error_class, task.next_attempt_at) == (
        "failed",
        "provider",
        None,
    )
    remediation = tasks.get(remediation_id(task_id))
    assert task.remediation_task_id == str(remediation.id)
    assert (remediation.kind, remediation.parent_task_id, remediation.status) == (
        "remediation",
        str(task_id),
        "queued",
    )
    assert remediation.source == "system" and remediation.max_attempts == 3
    for embedded in ("Fix the build", "exit code 1: 429 rate limit", "trying npm test"):
        assert embedded in remediation.prompt


def test_remediation_is_created_once_even_when_the_failure_is_observed_twice(
    tasks: TaskService,
) -> None:
    task_id = new_task(tasks)
    claim = claimed(tasks, task_id)
    first = tasks.fail(task_id, claim.attempt, "unknown", "exit code 3")
    again = tasks.fail(task_id, claim.attempt, "unknown", "exit code 3")
    assert first.position is not None and again.position is None
    assert tasks.ensure_remediation(task_id).position is None
    remediation: Aggregate = tasks.app.repository.get(remediation_id(task_id))
    assert remediation.version == 1  # created once, never touched again


def test_concurrent_remediation_requests_create_one(services: Services, tasks: TaskService) -> None:
    # A failure recorded without its follow-ups (as by an older version): two workers race
    # to remediate it, both having decided to create the remediation.
    task_id = new_task(tasks)
    claimed(tasks, task_id)
    bare: Task = services.app.repository.get(task_id)
    bare.fail(1, "unknown", "exit code 3", tasks.clock())
    services.app.record(bare)
    barrier = threading.Barrier(2)

    class Racing(TaskService):
        def transcript(self, task_id: UUID, attempt: int) -> Transcript | None:
            found = super().transcript(task_id, attempt)
            barrier.wait(5)
            return found

    second_app = open_application(services.settings)
    try:
        results: list[int | None] = []
        racers = [Racing(services.app), Racing(second_app)]
        threads = [
            threading.Thread(
                target=lambda r=r: results.append(r.ensure_remediation(task_id).position)
            )
            for r in racers
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        second_app.close()
    assert sum(p is not None for p in results) == 1
    assert tasks.app.repository.get(remediation_id(task_id)).version == 1
    assert tasks.get(task_id).remediation_task_id == str(remediation_id(task_id))


def test_remediation_never_creates_remediation(tasks: TaskService) -> None:
    task_id = new_task(tasks)
    tasks.fail(task_id, claimed(tasks, task_id).attempt, "unknown", "boom")
    rid = remediation_id(task_id)
    tasks.fail(rid, claimed(tasks, rid).attempt, "unknown", "boom again")
    remediation = tasks.get(rid)
    assert (remediation.status, remediation.remediation_task_id) == ("failed", None)
    with pytest.raises(NotFound):
        tasks.get(remediation_id(rid))


def test_completed_remediation_requeues_its_parent_while_attempts_remain(
    tasks: TaskService,
) -> None:
    task_id = new_task(tasks, max_attempts=2)
    tasks.fail(task_id, claimed(tasks, task_id).attempt, "unknown", "boom")
    rid = remediation_id(task_id)
    tasks.complete(rid, claimed(tasks, rid).attempt, "fixed the config")
    parent = tasks.get(task_id)
    assert (parent.status, parent.attempt_count) == ("queued", 1)
    # The second attempt fails too: the parent has its one remediation already, and no
    # attempts left, so it stays failed.
    tasks.fail(task_id, claimed(tasks, task_id).attempt, "unknown", "boom")
    parent = tasks.get(task_id)
    assert (parent.status, parent.attempt_count) == ("failed", 2)


def test_completed_remediation_leaves_an_exhausted_parent_alone(tasks: TaskService) -> None:
    task_id = new_task(tasks, max_attempts=1)
    tasks.fail(task_id, claimed(tasks, task_id).attempt, "unknown", "boom")
    rid = remediation_id(task_id)
    tasks.complete(rid, claimed(tasks, rid).attempt, "fixed")
    assert tasks.get(task_id).status == "failed"


def test_self_update_work_retries_transient_failures_with_capped_backoff(
    tasks: TaskService, clock: Clock
) -> None:
    task_id = new_task(tasks, source="self-update", max_attempts=5)
    start = clock.now
    waits = []
    for attempt in range(1, 5):
        claim = claimed(tasks, task_id)
        assert claim.attempt == attempt
        tasks.fail(task_id, attempt, "provider", "overloaded")
        task = tasks.get(task_id)
        assert task.status == "queued" and task.last_error_class == "provider"
        assert task.next_attempt_at is not None
        waits.append(task.next_attempt_at - clock.now)
        clock.advance(1)
        assert tasks.claim(task_id, WORKER) is None  # backoff not over yet
        clock.now = task.next_attempt_at
    assert waits == [timedelta(seconds=s) for s in (30, 60, 120, 120)]
    claim = claimed(tasks, task_id)
    tasks.fail(task_id, claim.attempt, "timeout", "timed out after 1800 s")
    task = tasks.get(task_id)
    assert (task.status, task.attempt_count, task.last_error_class) == ("dead-letter", 5, "timeout")
    assert tasks.get(remediation_id(task_id)).kind == "remediation"
    assert clock.now > start


def test_self_update_work_fails_at_once_on_a_non_transient_class(tasks: TaskService) -> None:
    task_id = new_task(tasks, source="self-update")
    tasks.fail(task_id, claimed(tasks, task_id).attempt, "validation", "bad prompt")
    assert tasks.get(task_id).status == "failed"


def test_cancel_queued_running_and_terminal(tasks: TaskService) -> None:
    queued = new_task(tasks)
    tasks.cancel(queued, "alice")
    assert tasks.get(queued).status == "cancelled"
    with pytest.raises(InvalidState) as refused:
        tasks.cancel(queued, "alice")
    assert refused.value.extra == {"currentState": "cancelled", "requestedState": "cancelled"}

    running = new_task(tasks)
    claim = claimed(tasks, running)
    tasks.cancel(running, "alice")
    assert tasks.get(running).status == "cancelling"
    assert tasks.cancel(running, "alice").position is None  # already being cancelled
    # Whatever the process reports afterwards, a cancelling attempt ends cancelled.
    tasks.complete(running, claim.attempt, "finished anyway")
    task = tasks.get(running)
    assert (task.status, task.outcome) == ("cancelled", None)
    with pytest.raises(NotFound):
        tasks.get(remediation_id(running))  # cancellation is not a failure


def test_resolve_only_from_failed_cancelled_or_dead_letter(tasks: TaskService) -> None:
    task_id = new_task(tasks)
    with pytest.raises(InvalidState):
        tasks.resolve(task_id, "done by hand", "alice")
    tasks.fail(task_id, claimed(tasks, task_id).attempt, "unknown", "boom")
    with pytest.raises(RuleViolation):
        tasks.resolve(task_id, "x" * 2049, "alice")
    tasks.resolve(task_id, "done by hand", "alice")
    task = tasks.get(task_id)
    assert (task.status, task.resolution, task.last_error, task.last_error_class) == (
        "completed",
        "done by hand",
        None,
        None,
    )
    with pytest.raises(InvalidState):
        tasks.resolve(task_id, "again", "alice")


def test_delete_only_terminal_tasks(tasks: TaskService) -> None:
    task_id = new_task(tasks)
    with pytest.raises(InvalidState):
        tasks.delete(task_id, "alice")
    tasks.cancel(task_id, "alice")
    tasks.delete(task_id, "alice")
    with pytest.raises(NotFound):
        tasks.get(task_id)
    with pytest.raises(NotFound):
        tasks.delete(task_id, "alice")


def test_recovery_requeues_below_max_attempts_and_dead_letters_exhausted_work(
    tasks: TaskService,
) -> None:
    below = new_task(tasks, max_attempts=2)
    exhausted = new_task(tasks, max_attempts=1)
    cancelling = new_task(tasks)
    for task_id in (below, exhausted, cancelling):
        claimed(tasks, task_id)
    tasks.cancel(cancelling, "alice")
    for task_id in (below, exhausted, cancelling):
        tasks.recover(task_id, 1, WORKER, "worker gone")
    assert (tasks.get(below).status, tasks.get(below).last_error_class) == (
        "queued",
        "infrastructure",
    )
    assert tasks.get(exhausted).status == "dead-letter"
    assert tasks.get(remediation_id(exhausted)).status == "queued"
    assert tasks.get(cancelling).status == "cancelled"
    assert claimed(tasks, below).attempt == 2


def test_reports_about_a_stale_attempt_change_nothing(tasks: TaskService) -> None:
    task_id = new_task(tasks)
    claimed(tasks, task_id)
    tasks.recover(task_id, 1, WORKER, "worker gone")
    second = claimed(tasks, task_id)
    assert tasks.complete(task_id, 1, "late result of attempt 1").position is None
    assert tasks.recover(task_id, 2, "someone-else", "not theirs").position is None
    assert tasks.get(task_id).status == "running"
    tasks.complete(task_id, second.attempt, "done")
    assert tasks.get(task_id).outcome == "done"


def test_every_event_type_saves_and_reloads(
    services: Services, tasks: TaskService, clock: Clock
) -> None:
    """Events stay plain: each type round-trips through the store into the same state."""
    a = new_task(tasks, source="self-update", max_attempts=3)
    claim = claimed(tasks, a)  # Created, Claimed
    tasks.append_activity(claim.transcript, [{"kind": "text", "text": "hi"}])  # Appended
    tasks.mark_interrupted(a, 1, "cannot reap")  # Interrupted
    tasks.fail(a, 1, "provider", "429")  # RetryScheduled
    retry_at = tasks.get(a).next_attempt_at
    assert retry_at is not None
    clock.now = retry_at  # the clock `tasks` reads
    claimed(tasks, a)
    tasks.recover(a, 2, WORKER, "gone")  # Requeued
    claimed(tasks, a)
    tasks.cancel(a, "bob")  # CancelRequested
    tasks.cancelled(a, 3)  # Cancelled
    tasks.resolve(a, "ok", "bob")  # Resolved
    tasks.delete(a, "bob")  # Deleted
    b = new_task(tasks, max_attempts=1)
    tasks.fail(b, claimed(tasks, b).attempt, "unknown", "x")  # Failed, RemediationLinked
    c = new_task(tasks, source="self-update", max_attempts=1)
    tasks.fail(c, claimed(tasks, c).attempt, "provider", "x")  # DeadLettered
    d = new_task(tasks)
    tasks.complete(d, claimed(tasks, d).attempt, "out")  # Completed
    reopened = open_application(services.settings)
    try:
        for aggregate_id in (a, b, c, d, transcript_id(a, 1), remediation_id(b)):
            live: TachographAggregate = services.app.repository.get(aggregate_id)
            again: TachographAggregate = reopened.repository.get(aggregate_id)
            assert again.state_dict() == live.state_dict()
            assert again.version == live.version
        types = {n.topic for n in reopened.recorder.select_notifications(start=1, limit=10_000)}
    finally:
        reopened.close()
    expected = {
        f"Task.{name}"
        for name in [
            "Created",
            "Claimed",
            "Completed",
            "Failed",
            "RetryScheduled",
            "DeadLettered",
            "Requeued",
            "RemediationLinked",
            "CancelRequested",
            "Cancelled",
            "Interrupted",
            "Resolved",
            "Deleted",
        ]
    } | {"Transcript.Created", "Transcript.Appended"}
    assert expected <= types
