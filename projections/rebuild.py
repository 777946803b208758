"""Rebuild projections from position 0 into fresh tables and compare them with the live ones."""

from __future__ import annotations

import gc
import hashlib
import json
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

from domain.application import Tachograph
from projections.base import Envelope, Projection
from projections.runner import apply_batch, decode, ensure_tracking_row
from projections.store import ReadStore


def drop_tables(store: ReadStore, projection: Projection) -> None:
    """Drop a projection's tables (used to start a rebuild from nothing)."""
    with store.transaction() as cur:
        for table in projection.t.values():
            cur.drop(table)


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
                cur.create(stmt)
            ensure_tracking_row(cur, tracking[projection.name], reset=True)
    total = 0
    with store.bulk_load(), _few_collections():
        for envelopes in _pages(app, batch_size, read_ahead=store.dialect == "postgres"):
            apply_batch(store, projections, envelopes, tracking)
            total += len(envelopes)
            if progress is not None:
                progress(len(envelopes))
        with store.transaction() as cur:
            for projection in projections:
                for stmt in projection.deferred_ddl():
                    cur.create(stmt)
    return total


# Young-generation threshold while a rebuild runs (CPython's default is 700).
REBUILD_GC_THRESHOLD = 20_000


@contextmanager
def _few_collections() -> Iterator[None]:
    """Keep the cyclic collector out of the way of a rebuild; restored afterwards.

    A page of thousands of envelopes lives just long enough to be promoted by the
    default young collections, and then every full collection walked it and the whole
    start-up heap again: over 200,000 events the collector took ~16% of the rebuild
    (15 full passes of ~85 ms). A rebuild's objects are acyclic and freed by reference
    counting, so collecting rarely costs nothing: with the start-up heap frozen and
    young collections every 20,000 allocations it ran 3 times, for ~40 ms in all.
    A process that froze its own heap (serve, worker) keeps it frozen.
    """
    threshold = gc.get_threshold()
    froze = gc.get_freeze_count() == 0
    if froze:
        gc.freeze()
    gc.set_threshold(max(threshold[0], REBUILD_GC_THRESHOLD), *threshold[1:])
    try:
        yield
    finally:
        gc.set_threshold(*threshold)
        if froze:
            gc.unfreeze()


def _pages(app: Tachograph, limit: int, *, read_ahead: bool) -> Iterator[list[Envelope]]:
    """The log's envelopes page by page; with `read_ahead`, each read while the last is used.

    On PostgreSQL both the read and the apply spend much of their time waiting on the
    server, so overlapping them gains (~10% measured); on SQLite both hold the
    interpreter lock nearly throughout and a second thread only adds hand-offs.
    """
    if not read_ahead:
        envelopes = _read_page(app, 0, limit)
        while envelopes:
            yield envelopes
            envelopes = _read_page(app, envelopes[-1].position, limit)
        return
    with ThreadPoolExecutor(1, thread_name_prefix="rebuild-read") as reader:
        envelopes = _read_page(app, 0, limit)
        while envelopes:
            ahead = reader.submit(_read_page, app, envelopes[-1].position, limit)
            yield envelopes
            envelopes = ahead.result()


def _read_page(app: Tachograph, after: int, limit: int) -> list[Envelope]:
    page = app.recorder.select_notifications(start=after, limit=limit, inclusive_of_start=False)
    return [decode(app, n) for n in page]


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
