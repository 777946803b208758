"""The chain projection keeps its tree edge between batches only while it is still the store's."""

from __future__ import annotations

from typing import ClassVar

import pytest

from bootstrap import Services
from projections.base import Projection
from projections.log_checkpoints import LogChainProjection
from projections.replay import replay
from projections.runner import apply_batch, decode, ensure_tracking_row
from projections.store import Cursor
from services.log_audit import verify_log
from tests.audit_support import bulk_history


class FailsAtTheEnd(Projection):
    """Fails its batch after every other projection wrote theirs: the transaction rolls back."""

    name = "fails_at_the_end"
    tables: ClassVar[dict[str, list[str]]] = {}

    def reads(self, event_type: str) -> bool:
        return True

    def apply(self, cur: Cursor, envelope: object) -> None:
        pass

    def end_batch(self, cur: Cursor) -> None:
        raise RuntimeError("the batch fails after the chain wrote its rows")


def test_two_replicas_and_a_rolled_back_batch_leave_the_tree_a_rebuild_equals(
    services: Services,
) -> None:
    head = bulk_history(services.app, 150)
    envelopes = [
        decode(services.app, n) for n in services.app.recorder.select_notifications(1, head)
    ]
    first, second = LogChainProjection(), LogChainProjection()  # two processes' runners
    with services.store.transaction() as cur:
        ensure_tracking_row(cur, FailsAtTheEnd.name)
    for n, start in enumerate(range(0, head, 37)):
        batch = envelopes[start : start + 37]
        if n % 3 == 1:
            with pytest.raises(RuntimeError):
                apply_batch(services.store, [first, FailsAtTheEnd()], batch)
        # Alternating replicas: each finds the chain grown by the other since its last batch.
        apply_batch(services.store, [first if n % 2 else second], batch)
    [report] = replay(services.app, services.store, [first])
    assert not report.drift, report.tables
    assert verify_log(services.app, services.store, None).ok
