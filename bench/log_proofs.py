"""Time inclusion and consistency proofs over a large Merkle tree, as the routes serve them.

    .venv/bin/python bench/log_proofs.py --events 1000000 [--postgres URL]

Fills the chain's and tree's read models of a fresh store with `--events` synthetic
events (through the live projections themselves, signing a note every 1,000 events as a
server would, 5,000 events per transaction as a rebuild writes them), adds a
signed-checkpoint row at a dozen random sizes, then times `inclusion` and
`consistency` (services/log_proofs.py, what `GET /api/log/proof/...` runs) for random
positions and sizes, in turns. Prints the fill rate and each proof's p50 and p99.
"""

from __future__ import annotations

import random
import statistics
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.log_integrity import scratch_services  # noqa: E402
from projections.base import Envelope  # noqa: E402
from projections.log_checkpoints import LogChainProjection  # noqa: E402
from projections.log_tree import NOTES_TABLE  # noqa: E402
from projections.runner import apply_batch  # noqa: E402
from services.log_proofs import consistency, inclusion  # noqa: E402

TREE = {LogChainProjection.name}  # the projection that keeps chain and tree
BATCH = 5000
QUERIES = 400
STAMP = b'{"timestamp":{"_type_":"datetime_iso","_data_":"2026-12-01T10:00:00.000000+00:00"}'


def envelopes(first: int, count: int) -> list[Envelope]:
    """Synthetic events: a session renamed again and again, ten versions per aggregate."""
    out = []
    for position in range(first, first + count):
        aggregate = uuid.UUID(int=position // 10 + 1)
        state = STAMP + b',"title":"session %d","actor":"bench"}' % position
        out.append(
            Envelope(position, aggregate, position % 10 + 1, "Session.Renamed", {}, state=state)
        )
    return out


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> int:
    # Services like a server's: the store, its schema and the note key that signs.
    with scratch_services(1_000_000) as (events, store_name, services):
        store = services.store
        projections = [p for p in services.projections if p.name in TREE]
        started = time.perf_counter()
        with store.bulk_load():
            for first in range(1, events + 1, BATCH):
                apply_batch(store, projections, envelopes(first, BATCH))
        fill_s = time.perf_counter() - started
        n = events
        sizes = sorted({n, *(random.randrange(n // 2, n) for _ in range(11))})
        with store.transaction() as cur:
            for size in sizes:  # the proofs need only the size to be a signed one
                cur.execute(
                    f"INSERT INTO {NOTES_TABLE} (size, position, root, note, recorded_at) "
                    "VALUES (?,?,?,?,?) ON CONFLICT (size) DO NOTHING",
                    (size, size, "00", "bench", "2026-12-01T10:00:00.000000Z"),
                )
        timings: dict[str, list[float]] = {"inclusion": [], "consistency": []}
        for _ in range(QUERIES):
            size = random.choice(sizes)
            t0 = time.perf_counter()
            inclusion(store, random.randint(1, size), size)
            t1 = time.perf_counter()
            old, new = sorted(random.sample(sizes, 2))
            consistency(store, old, new)
            t2 = time.perf_counter()
            timings["inclusion"].append(t1 - t0)
            timings["consistency"].append(t2 - t1)
        print(f"[{store_name}] {n} events into {sorted(TREE & {p.name for p in projections})}")
        print(f"[{store_name}] fill: {fill_s:.1f} s, {n / fill_s:,.0f} events/s")
        for name, values in timings.items():
            p50, p99 = statistics.median(values) * 1000, percentile(values, 0.99) * 1000
            print(f"[{store_name}] {name}: p50 {p50:.2f} ms, p99 {p99:.2f} ms ({QUERIES} proofs)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
