"""A session's timeline from the read model, or rebuilt from the log for what the read
model no longer keeps (it holds the latest 2,000 tool calls per session)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from domain.application import Tachograph
from infra.log_reader import iter_events
from projections.runner import decode
from projections.timeline import attach_deliveries, session_timeline, timeline_from_log


def _dispatches(app: Tachograph) -> Iterator[tuple[int, str, dict[str, Any]]]:
    for notification in iter_events(app, types=["HookDispatch.Created"]):
        envelope = decode(app, notification)
        yield envelope.position, envelope.at, envelope.data


def timeline_page(
    app: Tachograph,
    store: Any,
    session_id: str,
    *,
    limit: int,
    before: int | None,
    from_log: bool,
) -> tuple[list[dict[str, Any]], int | None]:
    """Turns newest first, at most `limit`, each starting before `before`; and the
    `before` of the next page (None on the last)."""
    if not from_log:
        return session_timeline(store, session_id, limit, before)
    # Every HookDispatch.Created of the log is read: slow on a big log, so only on request.
    everything = timeline_from_log(_dispatches(app), session_id)
    # Deliveries come from their read model, which keeps all of them (also a task
    # attempt's, which no dispatch records).
    attach_deliveries(store, session_id, everything, 0)
    turns = [turn for turn in everything if before is None or turn["position"] < before]
    page = turns[:limit]
    return page, (page[-1]["position"] if len(turns) > limit else None)
