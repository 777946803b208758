"""A session's timeline from the read model, or rebuilt from the log for what the read
model no longer keeps (it holds the latest 2,000 tool calls per session)."""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterator
from typing import Any

from domain.application import Tachograph
from infra.log_reader import iter_events
from projections.runner import decode
from projections.timeline import attach_deliveries, session_timeline, timeline_from_log
from projections.usage import NO_USAGE, session_requests


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
        page, next_before = session_timeline(store, session_id, limit, before)
        attach_model_requests(store, session_id, page, last_page=next_before is None)
        return page, next_before
    # Every HookDispatch.Created of the log is read: slow on a big log, so only on request.
    everything = timeline_from_log(_dispatches(app), session_id)
    # Deliveries come from their read model, which keeps all of them (also a task
    # attempt's, which no dispatch records).
    attach_deliveries(store, session_id, everything, 0)
    turns = [turn for turn in everything if before is None or turn["position"] < before]
    page = turns[:limit]
    attach_model_requests(store, session_id, page, last_page=len(turns) <= limit)
    return page, (page[-1]["position"] if len(turns) > limit else None)


def attach_model_requests(
    store: Any, session_id: str, turns: list[dict[str, Any]], *, last_page: bool
) -> None:
    """Put on each turn (newest first) the model requests its runtime reported from the
    turn's start to the next turn's, and their sum (`usage`). Requests are placed by
    time: the runtimes report no turn id the hooks also carry. On the last page the
    oldest turn also takes what came before it (a runtime's requests before its first
    prompt)."""
    if not turns:
        return
    for turn in turns:
        turn["modelRequests"] = []
    oldest_first = list(reversed(turns))
    starts = [str(turn["at"]) for turn in oldest_first]
    for request in session_requests(store, session_id):
        index = bisect_right(starts, request["at"]) - 1
        if index < 0:
            if not last_page:
                continue  # an older turn's, on another page
            index = 0
        oldest_first[index]["modelRequests"].append(request)
    for turn in turns:
        turn["usage"] = _summed(turn["modelRequests"])


def _summed(requests: list[dict[str, Any]]) -> dict[str, Any]:
    usage = dict(NO_USAGE)
    for request in requests:
        usage["requests"] += 1
        for figure in ("inputTokens", "outputTokens", "cacheReadTokens", "cacheCreationTokens"):
            usage[figure] += request[figure]
        usage["costUsd"] = round(usage["costUsd"] + request["costUsd"], 9)
    return usage
