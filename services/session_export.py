"""Every event of one session, in log order, with what an auditor needs to check it.

A session's events are its Session aggregate's and every HookDispatch recorded for it.
Each comes with its log position, the chain link recorded when it was appended and the
link before it, and its payload exactly as stored: `link` is then SHA-256 over
`previousLink`, the event's header and `stored` (domain/log_chain.py), which anyone can
recompute, and `tachograph verify` checks the links against the signed checkpoints. A
dispatch's record also names, as `policy`, the policy rule that decided it (or would
have, in shadow mode), null when none did.
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Iterator
from typing import Any
from uuid import UUID

from eventsourcing.persistence import Notification

from domain.application import Tachograph
from domain.log_chain import GENESIS
from infra.log_reader import event_record, iter_events, read_stream
from projections.log_checkpoints import LINKS_TABLE
from projections.policy_record import served as served_policy
from projections.store import ReadStore


def _dispatches_of(app: Tachograph, session_id: UUID) -> Iterator[Notification]:
    """The session's HookDispatch events (the log has no index by session: a full scan)."""
    wanted = str(session_id)
    for notification in iter_events(app, types=["HookDispatch.Created"]):
        if str(app.mapper.transcoder.decode(notification.state).get("session_id")) == wanted:
            yield notification


def _links(store: ReadStore, positions: list[int]) -> dict[int, tuple[str, str]]:
    """position -> (link, previous link) as the live chain recorded them."""
    found: dict[int, tuple[str, str]] = {}
    for start in range(0, len(positions), 500):
        chunk = positions[start : start + 500]
        marks = ",".join("?" * len(chunk))
        rows = store.query(
            f"SELECT l.position, l.link, p.link AS previous FROM {LINKS_TABLE} l "
            f"LEFT JOIN {LINKS_TABLE} p ON p.seq = l.seq - 1 WHERE l.position IN ({marks})",
            chunk,
        )
        for row in rows:
            found[int(row["position"])] = (str(row["link"]), str(row["previous"] or GENESIS))
    return found


def session_export(
    app: Tachograph,
    store: ReadStore,
    session_id: UUID,
    chained: Callable[[int], object] = lambda position: None,
) -> list[dict[str, Any]]:
    """The session's events as export records, oldest first (empty if it has none).

    `chained(position)` returns once the chain's read model holds that position (the
    links are read from it); the default assumes it does already.
    """
    notifications = {n.id: n for n in read_stream(app, session_id)}
    notifications.update((n.id, n) for n in _dispatches_of(app, session_id))
    positions = sorted(notifications)
    if not positions:
        return []
    chained(positions[-1])
    links = _links(store, positions)
    records = []
    for position in positions:
        notification = notifications[position]
        record = event_record(app, notification)
        link, previous = links.get(position, (None, None))
        record["link"] = link
        record["previousLink"] = previous
        record["stored"] = _stored_text(notification.state)
        if record["type"] == "HookDispatch.Created":
            # Beside `data` (as stored), the rule that decided the call as the API names it.
            record["policy"] = served_policy(record["data"])
        records.append(record)
    return records


def _stored_text(state: bytes) -> dict[str, str]:
    """The payload bytes as stored: UTF-8 text, or base64 when they are not UTF-8."""
    try:
        return {"encoding": "utf-8", "data": state.decode("utf-8")}
    except UnicodeDecodeError:
        return {"encoding": "base64", "data": base64.b64encode(state).decode()}
