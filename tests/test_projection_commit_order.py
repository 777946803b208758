"""A writer whose commit lands late never makes a projection skip or repeat an event."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from bootstrap import Services
from infra.pg_append import AppendFunction
from projections.log_checkpoints import LINKS_TABLE
from services.log_audit import verify_log


@pytest.mark.parametrize("store_kind", ["postgres"], indirect=True)
def test_held_writer_transaction_is_projected_exactly_once(
    services: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    services.start()
    recorder: Any = services.app.recorder
    inserted, release = threading.Event(), threading.Event()
    held_ids: list[int] = []
    append: AppendFunction = recorder._append_function

    class HoldingAppend(AppendFunction):
        def __call__(self, stored_events: Any) -> list[int]:
            if threading.current_thread().name != "held-writer":
                return append(stored_events)
            # The append's statement inside a transaction held open: rows inserted and
            # numbered, table lock taken, commit late.
            with recorder.datastore.get_connection() as conn:
                conn.execute("BEGIN")
                rows = conn.execute(append.call, append.columns(stored_events)).fetchall()
                held_ids.extend(row["notification_id"] for row in rows)
                inserted.set()
                release.wait(10)
                conn.execute("COMMIT")
            return list(held_ids)

    monkeypatch.setitem(recorder.__dict__, "_append_function_", HoldingAppend(recorder))
    held = threading.Thread(
        target=lambda: services.app.create_session("default", "held", "test"), name="held-writer"
    )
    held.start()
    assert inserted.wait(10)

    later: list[int] = []
    finished_at: list[float] = []

    def write_later(n: int) -> None:
        for i in range(5):
            position = services.app.create_session("default", f"later {n}.{i}", "test").position
            assert position is not None
            later.append(position)
        finished_at.append(time.monotonic())

    writers = [threading.Thread(target=write_later, args=(n,)) for n in range(4)]
    for w in writers:
        w.start()
    time.sleep(0.8)
    # While the first writer's transaction is open nothing after it is visible, so the
    # runner cannot have moved past its position.
    assert services.runner.position < held_ids[0]
    released_at = time.monotonic()
    release.set()
    held.join(10)
    for w in writers:
        w.join(10)

    head = services.app.recorder.max_notification_id() or 0
    assert min(later) > held_ids[0] and min(finished_at) > released_at
    assert services.runner.wait_for(head, 5)
    links = services.store.query(f"SELECT position, seq FROM {LINKS_TABLE} ORDER BY position")
    log_positions = [n.id for n in services.app.recorder.select_notifications(0, 10_000)]
    assert [r["position"] for r in links] == log_positions  # every event, once, in order
    assert [r["seq"] for r in links] == list(range(1, len(log_positions) + 1))
    titles = {r["title"] for r in services.store.query("SELECT title FROM rm_sessions")}
    assert titles == {"held"} | {f"later {n}.{i}" for n in range(4) for i in range(5)}
    assert verify_log(services.app, services.store, None).ok
