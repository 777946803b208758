"""Rebuild projections from position 0 into fresh tables and compare them with the live ones."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence

from domain.application import Tachograph
from projections.base import Projection
from projections.runner import apply_batch, decode, ensure_tracking_row
from projections.store import ReadStore


def drop_tables(store: ReadStore, projection: Projection) -> None:
    """Drop a projection's tables (used to start a rebuild from nothing)."""
    with store.transaction() as cur:
        for table in projection.t.values():
            cur.execute(f"DROP TABLE IF EXISTS {table}")


def rebuild(
    app: Tachograph,
    store: ReadStore,
    projections: Sequence[Projection],
    *,
    batch_size: int = 5000,
    progress: Callable[[int], None] | None = None,
) -> int:
    """Replay the whole log into the given (non-live) projections; return the events read.

    Nobody reads the tables being rebuilt, so batches are larger than the live runner's:
    each commit rewrites every index page it touched, and fewer commits touch fewer.
    """
    tracking = {p.name: f"rebuild:{p.prefix}{p.name}" for p in projections}
    for projection in projections:
        drop_tables(store, projection)
    with store.transaction() as cur:
        for projection in projections:
            for stmt in projection.ddl(deferred=False):
                cur.execute(stmt)
            ensure_tracking_row(cur, tracking[projection.name], reset=True)
    position, total = 0, 0
    while True:
        page = app.recorder.select_notifications(
            start=position, limit=batch_size, inclusive_of_start=False
        )
        if not page:
            with store.transaction() as cur:
                for projection in projections:
                    for stmt in projection.deferred_ddl():
                        cur.execute(stmt)
            return total
        apply_batch(store, projections, [decode(app, n) for n in page], tracking)
        position = page[-1].id
        total += len(page)
        if progress is not None:
            progress(len(page))


def table_digest(store: ReadStore, table: str, exclude: Sequence[str] = ()) -> tuple[int, str]:
    """Row count and SHA-256 over every row (sorted), ignoring some columns."""
    rows = store.query(f"SELECT * FROM {table}")
    canonical = sorted(
        json.dumps(
            {k: _normal(v) for k, v in row.items() if k not in exclude},
            sort_keys=True,
            default=str,
        )
        for row in rows
    )
    digest = hashlib.sha256("\n".join(canonical).encode()).hexdigest()
    return len(rows), digest


def _normal(value: object) -> object:
    # SQLite hands back booleans as 0/1; PostgreSQL as bool. Compare them alike.
    if isinstance(value, bool):
        return int(value)
    return value
