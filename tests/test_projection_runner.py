"""Projection runner: exactly-once effect across crashes, rebuild equality, on both stores."""

from __future__ import annotations

import functools
import gc
import time
from datetime import UTC, datetime, timedelta, timezone
from typing import Any, ClassVar

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bootstrap import Services
from domain.application import Tachograph
from domain.lifecycle import LifecycleEvent
from infra.log_reader import read_events
from ingest.loop import run_sync
from projections.base import Envelope, Projection, iso, stored_iso
from projections.rebuild import rebuild, table_digest
from projections.registry import all_projections
from projections.runner import ProjectionRunner
from projections.store import Cursor
from tests.support import applied_within


def make_history(services: Services, sessions: int = 30) -> None:
    app = services.app
    for i in range(sessions):
        recorded = app.create_session("default", None, "test")
        session_id = recorded.aggregate_id
        if i % 2:  # the others get their titles from hook events
            app.update_session(session_id, "test", title=f"t{i}", archived=i % 3 == 0)
        app.save_session_messages(session_id, 0, [f"m{i}"], "test")
        for turn in range(2):
            for event in _turn(i, turn):
                run_sync(services.ingest.ingest(session_id, event, actor="test"))
        if i % 5 == 0:
            app.delete_session(session_id, "test")
            # A straggler recorded after the delete must not revive its audit or row.
            run_sync(
                services.ingest.ingest(session_id, LifecycleEvent("PostToolUse"), actor="test")
            )


def _turn(i: int, turn: int) -> list[LifecycleEvent]:
    ids: dict[str, Any] = {
        "turn_id": f"turn-{turn}",
        "agent": "claude-code",
        "agent_session_id": f"a{i}",
    }
    events = [
        LifecycleEvent("UserPromptSubmit", prompt=f"fix bug {i}.{turn}", **ids),
        LifecycleEvent("PreToolUse", tool_name="Bash", tool_input={"command": "ls"}, **ids),
        LifecycleEvent("PostToolUse", tool_name="Bash", tool_response={"exitCode": 0}, **ids),
        LifecycleEvent("Stop", last_assistant_message=f"done {i}.{turn}", **ids),
    ]
    if i % 4 == 1 and turn == 1:
        events.append(LifecycleEvent("SessionEnd", **ids))
    return events


def assert_live_equals_rebuild(services: Services) -> None:
    fresh = all_projections(prefix="rb_")
    rebuild(services.app, services.store, fresh)
    for live, rebuilt in zip(services.projections, fresh, strict=True):
        for logical in live.tables:
            assert table_digest(services.store, live.t[logical]) == table_digest(
                services.store, rebuilt.t[logical]
            ), logical


class Crash(Exception):
    pass


class CrashingAt(Projection):
    """Wraps a projection and raises when it meets one position: a crash mid-batch."""

    name = "crashing"
    tables: ClassVar[dict[str, list[str]]] = {}

    def __init__(self, inner: Projection, position: int) -> None:
        super().__init__(inner.prefix)
        self.inner, self.position = inner, position
        self.name = inner.name  # type: ignore[misc]
        self.t = inner.t

    def reads(self, event_type: str) -> bool:
        return True  # sees every event, so it can crash on any position

    def begin_batch(self, cur: Cursor) -> None:
        self.inner.begin_batch(cur)

    def apply(self, cur: Cursor, envelope: Envelope) -> None:
        if envelope.position == self.position:
            raise Crash
        if self.inner.reads(envelope.type):
            self.inner.apply(cur, envelope)

    def end_batch(self, cur: Cursor) -> None:
        self.inner.end_batch(cur)


def test_crash_mid_batch_applies_nothing_and_restart_equals_replay(services: Services) -> None:
    make_history(services)
    head = services.app.recorder.max_notification_id()
    assert head is not None
    crash_at = head // 2
    crashing = [CrashingAt(p, crash_at) for p in services.projections]
    first = ProjectionRunner(services.app, services.store, crashing, batch_size=7)
    with pytest.raises(Crash):
        first.catch_up()
    # Everything before the failing batch committed; nothing of the failing batch did.
    positions = first.positions()
    assert set(positions.values()) == {(crash_at - 1) // 7 * 7}
    restarted = ProjectionRunner(services.app, services.store, services.projections)
    restarted.catch_up()
    assert set(restarted.positions().values()) == {head}
    assert_live_equals_rebuild(services)


def test_two_runners_on_one_store_never_double_apply(services: Services) -> None:
    make_history(services, sessions=20)
    a = ProjectionRunner(services.app, services.store, services.projections, batch_size=5)
    b = ProjectionRunner(services.app, services.store, all_projections(), batch_size=3)
    for _ in range(40):
        a.run_once()
        b.run_once()
    a.catch_up()
    b.catch_up()
    assert_live_equals_rebuild(services)


def _reads_of(runner_app: Tachograph) -> list[tuple[int, int]]:
    """(start, notifications found) of every read of the log from now on."""
    reads: list[tuple[int, int]] = []
    original = runner_app.recorder.select_notifications

    def counted(*args: Any, **kwargs: Any) -> Any:
        found = original(*args, **kwargs)
        reads.append((kwargs["start"], len(found)))
        return found

    runner_app.recorder.select_notifications = counted  # type: ignore[method-assign]
    return reads


def test_offered_notifications_are_applied_unread_and_gaps_read_from_the_log(
    services: Services,
) -> None:
    make_history(services, sessions=12)
    log = read_events(services.app, 0, 100_000)
    gap = log[len(log) // 2].id  # as if another process had appended it
    offered = {n.id for n in log} - {gap}
    runner = ProjectionRunner(services.app, services.store, services.projections, batch_size=50)
    reads = _reads_of(services.app)
    runner.offer(n for n in log if n.id in offered)
    runner.catch_up()
    found = [start for start, count in reads if count]
    # The log was read only where the offered run broke off, at the gap first.
    assert found and found[0] == gap - 1
    assert all(start + 1 not in offered for start in found)
    assert_live_equals_rebuild(services)
    # Offered again, already applied: exactly once, nothing changes.
    runner.offer(log)
    assert runner.run_once() == 0
    assert_live_equals_rebuild(services)


def test_this_process_offers_what_it_appends_to_its_runner(services: Services) -> None:
    services.runner.catch_up()
    reads = _reads_of(services.app)
    session_id = services.app.create_session("default", "offered", "test").aggregate_id
    run_sync(services.ingest.ingest(session_id, LifecycleEvent("PostToolUse"), actor="test"))
    while services.runner.run_once():
        pass
    assert [count for _, count in reads if count] == []  # nothing read back
    assert_live_equals_rebuild(services)


def test_batched_rebuild_equals_event_at_a_time(services: Services) -> None:
    make_history(services, sessions=15)
    one = all_projections(prefix="one_")
    rebuild(services.app, services.store, one, batch_size=1)
    many = all_projections(prefix="many_")
    rebuild(services.app, services.store, many, batch_size=500)
    for a, b in zip(one, many, strict=True):
        for logical in a.tables:
            count, digest = table_digest(services.store, a.t[logical])
            assert (count, digest) == table_digest(services.store, b.t[logical])
    assert table_digest(services.store, "one_sessions")[0] == 12


def test_waiter_is_released_by_the_runner_commit(services: Services) -> None:
    services.start()
    recorded = services.app.create_session("default", "x", "test")
    assert recorded.position is not None
    assert services.runner.wait_for(recorded.position, 2.0)
    assert services.runner.position >= recorded.position


def test_a_waiting_reader_cuts_the_runners_linger_short(services: Services) -> None:
    runner = ProjectionRunner(services.app, services.store, services.projections, linger=60)
    app = services.app
    app.create_session("default", "a", "test")
    second = app.create_session("default", "b", "test").position or 0
    runner.start()  # its first batch reads both events, so it lingers afterwards
    try:
        deadline = time.monotonic() + 10
        while runner.position < second and time.monotonic() < deadline:
            time.sleep(0.01)  # watched, not waited for: a waiter would end the linger
        assert runner.position >= second
        third = app.create_session("default", "c", "test").position or 0
        # A 60 s linger would outlast this wait unless the waiting reader ends it.
        assert runner.wait_for(third, 5.0)
    finally:
        runner.stop()


@given(
    st.datetimes(
        max_value=datetime(9999, 12, 30),
        timezones=st.sampled_from([UTC, timezone(timedelta(hours=-7))]),
    )
)
def test_iso_times_keep_their_fixed_width_text(value: datetime) -> None:
    # Read models compare these strings as times: the fast path must not change a byte.
    assert iso(value) == value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@functools.cache
def _transcoder() -> Any:
    return Tachograph().mapper.transcoder


@given(
    st.datetimes(
        min_value=datetime(1, 1, 1),
        max_value=datetime(9999, 12, 30),
        timezones=st.sampled_from([UTC, timezone(timedelta(hours=-7)), timezone(timedelta(0))]),
    )
)
def test_time_read_from_a_stored_payload_is_the_formatted_time(value: datetime) -> None:
    # Encoded exactly as the event store encodes an event's payload.
    state = _transcoder().encode({"timestamp": value, "title": "x"})
    read = stored_iso(state)
    assert read is None or read == iso(value)
    if value.tzinfo is UTC and value.microsecond and value.year >= 1000:
        assert read == iso(value)  # the common case is read, not left to the slow path


def test_a_rebuild_leaves_wal_checkpoints_as_it_found_them(services: Services) -> None:
    make_history(services, sessions=3)
    rebuild(services.app, services.store, all_projections(prefix="bulk_"))
    if services.store.dialect == "sqlite":
        # Deferred during the rebuild only: live commits on this connection checkpoint again.
        row = services.store.query_one("PRAGMA wal_autocheckpoint")
        assert row is not None and list(row.values()) == [1000]
    assert table_digest(services.store, "bulk_sessions")[0] == 2  # the rebuild happened


def test_a_rebuild_collects_rarely_and_leaves_the_collector_as_it_found_it(
    services: Services,
) -> None:
    make_history(services, sessions=3)
    seen: list[tuple[tuple[int, int, int], int]] = []
    before = gc.get_threshold()
    gc.unfreeze()
    try:
        rebuild(
            services.app,
            services.store,
            all_projections(prefix="gc_"),
            batch_size=50,
            progress=lambda _: seen.append((gc.get_threshold(), gc.get_freeze_count())),
        )
        assert seen and all(t[0] >= 20_000 and frozen > 0 for t, frozen in seen)
        assert gc.get_threshold() == before and gc.get_freeze_count() == 0
        # A process that froze its own heap keeps it frozen.
        gc.freeze()
        rebuild(services.app, services.store, all_projections(prefix="gc_"))
        assert gc.get_freeze_count() > 0 and gc.get_threshold() == before
    finally:
        gc.unfreeze()


def test_a_commit_lingers_before_it_is_applied_but_never_for_a_reader(
    services: Services,
) -> None:
    runner = services.runner
    runner.commit_linger = 60.0  # far longer than the test: only a reader cuts it short
    runner.poll_interval = 60.0  # and no polling pass picks the event up meanwhile
    app = services.app
    services.start()
    services.scheduler.stop()  # its jobs wait for positions, which cuts the linger short
    time.sleep(0.2)  # the runner is idle, waiting for a commit
    held = app.create_session("default", "b", "test").position or 0
    assert not applied_within(runner, held, 0.3)  # the commit woke it; it lingers
    # A reader waiting for the position is never held.
    assert runner.wait_for(held, 5.0)
