"""What keeping the Merkle tree costs the projection runner, beside the ingest it serves.

Recorded hook dispatches (PreToolUse calls, bench/policy_backtest.py `fill`) are applied
in batches of the size the live runner meets at ingest to fresh tables, in alternated
rounds: by the hash chain alone (`ChainOnly`: the link per event, nothing of the tree),
by the projections that keep chain and tree (`log_checkpoints`, and `log_tree` where a
checkout still has it), and by every projection. The tree's cost per event is the
difference of the first two; it is compared with the whole runner's cost per event and
with the wall time per event of the ingest route measured in the same run
(`bench_ingest`). No setting of the product turns the tree off: `ChainOnly` exists here
only, as the baseline.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from domain.log_chain import GENESIS, next_link
from projections.base import Envelope, Projection
from projections.log_checkpoints import LogChainProjection
from projections.rebuild import drop_tables
from projections.runner import apply_batch, decode, ensure_tracking_row
from projections.store import Cursor, ReadStore

ROUNDS = 5
BATCH = 20  # events per runner transaction, about what the live runner meets at ingest


class ChainOnly(Projection):
    """The hash chain's per-event work and row without the tree: the baseline."""

    name = "bench_chain_only"
    tables = {
        "chain_only": [
            "CREATE TABLE IF NOT EXISTS {t} (position BIGINT PRIMARY KEY, seq BIGINT NOT NULL, "
            "aggregate_id TEXT NOT NULL, version BIGINT NOT NULL, type TEXT NOT NULL, "
            "link TEXT NOT NULL)",
            "CREATE UNIQUE INDEX IF NOT EXISTS {t}_seq ON {t} (seq)",
        ]
    }
    applies_in_bulk = True

    def reads(self, event_type: str) -> bool:
        return True

    def begin_batch(self, cur: Cursor) -> None:
        self._rows: list[tuple[int, int, str, int, str, str]] = []

    def apply_all(self, cur: Cursor, envelopes: Sequence[Envelope]) -> None:
        cur.execute(
            f"SELECT position, seq, link FROM {self.t['chain_only']} ORDER BY position DESC LIMIT 1"
        )
        row = cur.fetchone()
        position, seq, link = (
            (0, 0, GENESIS) if row is None else (row["position"], row["seq"], row["link"])
        )
        for e in envelopes:
            if e.position <= position:
                continue
            link = next_link(link, e.head, e.state)
            seq, position = seq + 1, e.position
            self._rows.append((position, seq, e.key, e.version, e.type, link))

    def end_batch(self, cur: Cursor) -> None:
        if self._rows:
            cur.executemany(
                f"INSERT INTO {self.t['chain_only']} (position, seq, aggregate_id, version, "
                "type, link) VALUES (?,?,?,?,?,?)",
                self._rows,
            )


def _timed(
    store: ReadStore, make: Callable[[], list[Projection]], envelopes: Sequence[Envelope]
) -> float:
    """Seconds to apply the envelopes, BATCH at a time, to fresh tables of the projections."""
    projections = make()
    tracking = {p.name: f"bench:{p.prefix}{p.name}" for p in projections}
    for projection in projections:
        drop_tables(store, projection)
    with store.transaction() as cur:
        for projection in projections:
            for stmt in projection.ddl():
                cur.create(stmt)
            ensure_tracking_row(cur, tracking[projection.name], reset=True)
    started = time.perf_counter()
    for first in range(0, len(envelopes), BATCH):
        apply_batch(store, projections, envelopes[first : first + BATCH], tracking)
    took = time.perf_counter() - started
    for projection in projections:
        drop_tables(store, projection)
    return took


def bench_merkle(
    store: Any,
    events: int,
    work: Path,
    *,
    services_of: Callable[[Any], Any],
    ingest: Callable[[Any, int, Path], dict[str, Any]],
) -> dict[str, Any]:
    """`services_of` and `ingest`: bench/run.py's (handed in: bench/run.py imports this
    module)."""
    from bench.policy_backtest import fill
    from projections.registry import all_projections

    def with_tree() -> list[Projection]:
        return [p for p in all_projections(prefix="bench_") if p.name == LogChainProjection.name]

    services = services_of(store)
    try:
        app = services.app
        fill(app, services.runner, events)
        head = int(app.recorder.max_notification_id() or 0)
        notifications = app.recorder.select_notifications(head - events + 1, events)
        envelopes = [decode(app, n) for n in notifications]
        runs: dict[str, list[float]] = {"chain_only": [], "chain_and_tree": [], "runner": []}
        makers: dict[str, Callable[[], list[Projection]]] = {
            "chain_only": lambda: [ChainOnly("bench_")],
            "chain_and_tree": with_tree,
            "runner": lambda: all_projections(prefix="bench_"),
        }
        for n in range(ROUNDS):
            order = list(makers) if n % 2 == 0 else list(reversed(makers))
            for name in order:
                runs[name].append(_timed(services.store, makers[name], envelopes))
    finally:
        services.close()
    per_event = {name: statistics.median(v) / len(envelopes) * 1e6 for name, v in runs.items()}
    tree_us = per_event["chain_and_tree"] - per_event["chain_only"]
    ingested = ingest(store, 3, work)
    ingest_us = 1e6 / ingested["events_per_s"]
    return {
        "workload": (
            f"{len(envelopes)} recorded PreToolUse dispatches applied {BATCH} per transaction, "
            f"median of {ROUNDS} alternated rounds; ingest: POST PostToolUse, wrk 3 s"
        ),
        "us_per_event": per_event,
        "tree_us_per_event": tree_us,
        "tree_share_of_runner": tree_us / per_event["runner"],
        "ingest_events_per_s": ingested["events_per_s"],
        "ingest_wall_us_per_event": ingest_us,
        "tree_share_of_ingest": tree_us / ingest_us,
        "projections": sorted(p.name for p in with_tree()),
        "rounds_s": runs,
    }
