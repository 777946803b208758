"""Group commit: concurrent appends share transactions; each caller gets its own answer."""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from uuid import UUID, uuid4

import pytest
from eventsourcing.domain import DomainEventProtocol
from eventsourcing.persistence import IntegrityError

from bootstrap import Services
from domain.hook_dispatch_record import HookDispatch
from infra.log_reader import read_events, read_stream
from ingest.group_commit import GroupCommitter


def dispatch(dispatch_id: UUID, session_id: UUID) -> HookDispatch:
    return HookDispatch(
        dispatch_id=dispatch_id,
        session_id=session_id,
        event_name="PostToolUse",
        event_id=None,
        turn_id=None,
        agent=None,
        agent_session_id=None,
        tool_name=None,
        tool_call_id=None,
        subagent_id=None,
        outcome="pass",
        reason=None,
        additional_context=None,
        replacement=None,
        runs=[],
        title_hint=None,
        summary_hint=None,
        note=None,
        actor="test",
    )


def test_32_writers_with_injected_conflicts_each_get_their_own_answer(services: Services) -> None:
    app = services.app
    session_id = uuid4()
    taken = [uuid4() for _ in range(40)]
    for dispatch_id in taken:  # these IDs exist already: appending them again must conflict
        app.save(dispatch(dispatch_id, session_id))
    head_before = app.recorder.max_notification_id()
    assert head_before is not None
    batches: list[int] = []
    committer = GroupCommitter(app, on_batch=batches.append)
    results: dict[UUID, int | str] = {}
    lock = threading.Lock()
    barrier = threading.Barrier(32)

    def writer(n: int) -> None:
        barrier.wait()
        for i in range(25):
            dispatch_id = taken[(n + i) % len(taken)] if i % 5 == 0 else uuid4()
            try:
                outcome: int | str = committer.record(dispatch(dispatch_id, session_id))
            except IntegrityError:
                outcome = "conflict"
            with lock:
                results[dispatch_id] = outcome

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(32)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    committer.close()

    conflicts = {k for k, v in results.items() if v == "conflict"}
    assert conflicts == set(taken) & set(results)
    appended = read_events(app, head_before, 10_000)
    assert len(appended) == 32 * 20  # exactly the non-conflicting events, once each
    assert {n.originator_id for n in appended} == {k for k, v in results.items() if v != "conflict"}
    for dispatch_id, position in results.items():
        if position != "conflict":
            assert [n.id for n in read_stream(app, dispatch_id)] == [position]
    assert max(batches) > 1  # concurrent appends really shared transactions


def test_store_failure_releases_every_waiter(
    services: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    committer = GroupCommitter(services.app)

    def down(*_: object) -> object:
        raise ConnectionError("database down")

    monkeypatch.setattr(services.app, "save_events", down)
    with pytest.raises(ConnectionError):
        committer.record(dispatch(uuid4(), uuid4()))
    committer.close()


def test_waiters_sharing_a_deliver_are_resolved_there_once_per_batch(services: Services) -> None:
    batches: list[int] = []
    committer = GroupCommitter(services.app, on_batch=batches.append)
    delivered: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
    resolved_in: list[int] = []
    taken = uuid4()
    services.app.save(dispatch(taken, uuid4()))
    futures = []
    for n in range(200):
        future = committer.submit(dispatch(taken if n == 7 else uuid4(), uuid4()), delivered.put)
        future.add_done_callback(lambda _: resolved_in.append(threading.get_ident()))
        futures.append(future)
    calls = 0
    while not all(f.done() for f in futures):
        # Nothing resolves until this thread runs what the committer delivered.
        delivered.get(timeout=10)()
        calls += 1
    committer.close()
    assert calls <= len(batches) < 200  # one delivery per batch, and batches did form
    assert resolved_in == [threading.get_ident()] * 200
    assert isinstance(futures[7].exception(), IntegrityError)  # the conflict stays its own
    assert all(f.exception() is None for n, f in enumerate(futures) if n != 7)


def test_a_failing_callback_costs_no_other_caller_its_answer(services: Services) -> None:
    committer = GroupCommitter(services.app)
    delivered: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
    answers: dict[int, int | BaseException] = {}
    ids = [uuid4() for _ in range(20)]

    def answer(n: int) -> Callable[[int | BaseException], None]:
        def done(outcome: int | BaseException) -> None:
            answers[n] = outcome
            if n == 3:
                raise ValueError("a broken caller")

        return done

    for n, dispatch_id in enumerate(ids):
        pending = dispatch(dispatch_id, uuid4()).collect_events()
        events: list[DomainEventProtocol[UUID]] = list(pending)
        committer.enqueue(dispatch_id, events, answer(n), delivered.put)
    while len(answers) < len(ids):
        delivered.get(timeout=10)()
    # The writer survived the broken callback: it still commits and answers.
    assert committer.record(dispatch(uuid4(), uuid4())) > 0
    committer.close()
    for n, dispatch_id in enumerate(ids):
        assert answers[n] == read_stream(services.app, dispatch_id)[0].id


def test_queued_builders_run_in_the_committing_thread_and_fail_alone(services: Services) -> None:
    committer = GroupCommitter(services.app)
    delivered: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
    answers: dict[int, int | BaseException] = {}
    built_on: set[int] = set()
    ids = [uuid4() for _ in range(20)]

    def build(n: int, dispatch_id: UUID) -> Callable[[], list[DomainEventProtocol[UUID]]]:
        def events() -> list[DomainEventProtocol[UUID]]:
            built_on.add(threading.get_ident())
            if n == 5:
                raise ValueError("facts that could not be built")
            return list(dispatch(dispatch_id, uuid4()).collect_events())

        return events

    def answer(n: int) -> Callable[[int | BaseException], None]:
        return lambda outcome: answers.__setitem__(n, outcome)

    for n, dispatch_id in enumerate(ids):
        committer.enqueue(dispatch_id, build(n, dispatch_id), answer(n), delivered.put)
    while len(answers) < len(ids):
        delivered.get(timeout=10)()
    committer.close()
    assert threading.get_ident() not in built_on  # built by the writer, not the caller
    assert isinstance(answers[5], ValueError)
    assert read_stream(services.app, ids[5]) == []  # nothing recorded for it
    for n, dispatch_id in enumerate(ids):
        if n != 5:
            assert answers[n] == read_stream(services.app, dispatch_id)[0].id


def test_positions_reported_for_a_batch_are_where_the_log_holds_each_event(
    services: Services,
) -> None:
    app = services.app
    app.save(dispatch(uuid4(), uuid4()))  # the log does not start empty
    events = [e for _ in range(50) for e in dispatch(uuid4(), uuid4()).collect_events()]
    reported = {r.domain_event.originator_id: r.notification.id for r in app.save_events(events)}
    log = read_events(app, 0, 500)
    stored = {n.originator_id: n.id for n in log if n.originator_id in reported}
    assert reported == stored and len(stored) == 50


def test_a_lone_blocking_caller_commits_on_its_own_thread(services: Services) -> None:
    committed_on: list[int] = []
    committer = GroupCommitter(
        services.app, on_batch=lambda size: committed_on.append(threading.get_ident())
    )
    dispatch_id = uuid4()
    position = committer.record(dispatch(dispatch_id, uuid4()))
    committer.close()
    # No hand-off to the writer thread and back: the caller led its own commit.
    assert committed_on == [threading.get_ident()]
    assert [n.id for n in read_stream(services.app, dispatch_id)] == [position]
    with pytest.raises(RuntimeError):
        committer.record(dispatch(uuid4(), uuid4()))
