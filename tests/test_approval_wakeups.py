"""PostgreSQL LISTEN/NOTIFY wake-ups for held approvals (infra/approval_wakeups.py), against
the real server: a notification reaches every listener of the same schema's channel, and
none of another schema's."""

from __future__ import annotations

import queue
import uuid

import pytest

from infra.approval_wakeups import PgApprovalWakeups, channel_for
from infra.settings import Settings

pytestmark = pytest.mark.parametrize("store_kind", ["postgres"], indirect=True)


def test_a_notification_wakes_the_same_schemas_listeners_only(settings: Settings) -> None:
    assert settings.database_url is not None
    conninfo = settings.database_url.conninfo()
    schema = settings.database_schema
    holder, decider = PgApprovalWakeups(conninfo, schema), PgApprovalWakeups(conninfo, schema)
    elsewhere = PgApprovalWakeups(conninfo, schema + "_other")
    heard: queue.SimpleQueue[uuid.UUID] = queue.SimpleQueue()
    overheard: queue.SimpleQueue[uuid.UUID] = queue.SimpleQueue()
    holder.listen(heard.put)
    elsewhere.listen(overheard.put)
    try:
        approval = uuid.uuid4()
        # The listeners connect on their own threads: notify until the holder has heard.
        for _ in range(50):
            decider.notify(approval)
            try:
                assert heard.get(timeout=0.2) == approval
                break
            except queue.Empty:
                continue
        else:
            pytest.fail("the holder never heard the decider's notification")
        assert overheard.empty()
    finally:
        for wakeups in (holder, decider, elsewhere):
            wakeups.stop()
    assert channel_for(schema) != channel_for(schema + "_other")
    assert len(channel_for("x" * 63)) <= 63
