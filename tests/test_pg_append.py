"""PostgreSQL appends without pipeline mode, and the pool check that pings stale connections."""

from __future__ import annotations

import logging
import time
import uuid
from typing import Any

import psycopg
import pytest
from eventsourcing.persistence import IntegrityError, StoredEvent
from psycopg_pool import ConnectionPool

import infra.pool_check
from infra.pool_check import ping_when_stale
from tests.support import PG_URL

TOPIC = "tests:Event"


def stored(originator_id: uuid.UUID | str | None = None, version: int = 1) -> StoredEvent:
    return StoredEvent(originator_id or uuid.uuid4(), version, TOPIC, b'{"n":"\\u0000\xff"}')


@pytest.mark.parametrize("store_kind", ["postgres"], indirect=True)
def test_a_batch_gets_consecutive_positions_and_reads_back_byte_for_byte(recorder: Any) -> None:
    batch = [stored() for _ in range(5)]
    ids = recorder.insert_events(batch)
    assert ids == list(range(ids[0], ids[0] + 5))
    back = recorder.select_notifications(ids[0], limit=10)
    assert [(n.originator_id, n.originator_version, n.topic, n.state) for n in back] == [
        (e.originator_id, e.originator_version, e.topic, e.state) for e in batch
    ]


@pytest.mark.parametrize("store_kind", ["postgres"], indirect=True)
def test_a_conflict_fails_the_whole_batch_and_leaves_the_connection_idle(
    recorder: Any, caplog: pytest.LogCaptureFixture
) -> None:
    first = stored()
    recorder.insert_events([first])
    before = recorder.max_notification_id()
    with caplog.at_level(logging.WARNING, logger="psycopg.pool"):
        with pytest.raises(IntegrityError):
            recorder.insert_events([stored(), stored(first.originator_id, 1)])
        assert recorder.max_notification_id() == before  # nothing of the batch landed
        # The pool got the connection back idle: no rollback had to be forced on it.
        assert not [r for r in caplog.records if "rolling back" in r.getMessage()]
    (after,) = recorder.insert_events([stored(first.originator_id, 2)])
    assert after > before and recorder.max_notification_id() == after


@pytest.mark.parametrize("store_kind", ["postgres"], indirect=True)
def test_an_append_notifies_listeners(recorder: Any) -> None:
    with psycopg.connect(PG_URL, autocommit=True) as listener:
        listener.execute(f'LISTEN "{recorder.channel_name}"')
        recorder.insert_events([stored()])
        received = list(listener.notifies(timeout=5, stop_after=1))
    # The channel is per database, not per schema: other writers may notify it too.
    assert recorder.channel_name in {n.channel for n in received}


def _terminate(pid: int) -> None:
    with psycopg.connect(PG_URL, autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
    time.sleep(0.2)  # the backend is gone once the signal is handled


def test_a_connection_not_pinged_for_a_while_is_pinged_and_a_dead_one_replaced(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(infra.pool_check, "MAX_AGE_S", 0.05)
    with ConnectionPool(PG_URL, min_size=1, max_size=1, check=ping_when_stale) as pool:
        with pool.connection() as conn:
            dead = conn.info.backend_pid
        _terminate(dead)
        with pool.connection() as conn:
            assert conn.info.backend_pid != dead
            assert conn.execute("SELECT 1").fetchone() == (1,)


def test_a_connection_pinged_just_now_is_handed_out_without_another_round_trip() -> None:
    with ConnectionPool(PG_URL, min_size=1, max_size=1, check=ping_when_stale) as pool:
        with pool.connection() as conn:
            pid = conn.info.backend_pid
        _terminate(pid)
        # Within the second the ping is skipped: the dead connection is handed out, and its
        # first use fails (the recorder retries that once on another connection).
        with pytest.raises(psycopg.OperationalError), pool.connection() as conn:
            assert conn.info.backend_pid == pid
            conn.execute("SELECT 1")
