"""Task board: `GET /api/tasks?limit=200` with N tasks × R activity records each, against the
same N tasks without activity, measured in the same run (SPEC §12; target ≤ 1.2×).

    .venv/bin/python bench/task_board.py [--tasks 5000] [--records 256] [--postgres URL]

Both stores are filled through the domain (tasks claimed, transcripts appended in
batches), the projections catch up, then the list route is called through the
FastAPI app; the figure is the median latency and the ratio of the two medians.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fastapi.testclient import TestClient  # noqa: E402

from api.app import create_app  # noqa: E402
from bootstrap import build_services  # noqa: E402
from domain.task import Task  # noqa: E402
from domain.task_service import new_task  # noqa: E402
from domain.transcript import Transcript  # noqa: E402
from infra.settings import Settings  # noqa: E402

PER_SAVE = 25


def fill(settings: Settings, tasks: int, records: int) -> float:
    """Create the tasks (and their activity); return seconds until read models caught up."""
    started = time.perf_counter()
    services = build_services(settings)
    try:
        now = datetime.now(UTC)
        line = {"kind": "tool_result", "tool": "Bash", "result": "x" * 200}
        for start in range(0, tasks, PER_SAVE):
            batch: list[Task | Transcript] = []
            for n in range(start, min(start + PER_SAVE, tasks)):
                task = new_task(
                    "default", f"Task {n}: fix it", None, 3, "bench", "user", None, None
                )
                if records:
                    turn = str(uuid.uuid4())
                    task.claim(now, "bench", turn, uuid.uuid4())
                    transcript = Transcript(task_id=task.id, attempt=1, turn_id=turn)
                    transcript.append([dict(line, text=f"{n}.{i}") for i in range(records)], now)
                    task.complete(1, "done", now)  # settled, so restart recovery leaves it be
                    batch.append(transcript)
                batch.append(task)
            services.app.record(*batch)
        services.runner.catch_up()
    finally:
        services.close()
    return time.perf_counter() - started


def measure(settings: Settings, requests: int) -> dict[str, float]:
    """Median and p95 latency (ms) of the board query through the app."""
    with TestClient(create_app(settings)) as client:
        for _ in range(10):  # warm caches and pools
            assert client.get("/api/tasks?limit=200").status_code == 200
        samples = []
        for _ in range(requests):
            t0 = time.perf_counter()
            response = client.get("/api/tasks?limit=200")
            samples.append((time.perf_counter() - t0) * 1000)
            assert response.status_code == 200 and len(response.json()["items"]) == 200
    samples.sort()
    return {
        "median_ms": round(statistics.median(samples), 2),
        "p95_ms": round(samples[int(len(samples) * 0.95) - 1], 2),
    }


def run(kind: str, pg_url: str | None, tasks: int, records: int, requests: int) -> dict[str, Any]:
    results: dict[str, Any] = {"store": kind}
    with tempfile.TemporaryDirectory() as tmp:
        for label, per_task in (("with_activity", records), ("no_activity", 0)):
            root = Path(tmp, label)
            (root / "workspace").mkdir(parents=True)
            settings = Settings(data_dir=root / "data", workspace_root=root / "workspace")
            schema = None
            if kind == "postgres":
                assert pg_url is not None
                schema = f"bench_{uuid.uuid4().hex[:10]}"
                url = Settings.from_env({"TACHOGRAPH_DATABASE_URL": pg_url}).database_url
                settings = settings.with_(database_url=url, database_schema=schema)
            try:
                fill_s = fill(settings, tasks, per_task)
                results[label] = {"fill_s": round(fill_s, 1), **measure(settings, requests)}
            finally:
                if schema is not None and pg_url is not None:
                    import psycopg

                    with psycopg.connect(pg_url, autocommit=True) as conn:
                        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    ratio = results["with_activity"]["median_ms"] / results["no_activity"]["median_ms"]
    results["ratio"] = round(ratio, 2)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tasks", type=int, default=5000)
    parser.add_argument("--records", type=int, default=256)
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--postgres", help="also measure on this PostgreSQL URL")
    args = parser.parse_args()
    kinds = ["sqlite"] + (["postgres"] if args.postgres else [])
    for kind in kinds:
        result = run(kind, args.postgres, args.tasks, args.records, args.requests)
        print(
            f"{kind}: board with {args.tasks} tasks x {args.records} records "
            f"{result['with_activity']['median_ms']} ms (p95 {result['with_activity']['p95_ms']}) "
            f"vs no activity {result['no_activity']['median_ms']} ms "
            f"(p95 {result['no_activity']['p95_ms']}): ratio {result['ratio']}x "
            f"[fill {result['with_activity']['fill_s']} s / {result['no_activity']['fill_s']} s]",
            flush=True,
        )


if __name__ == "__main__":
    main()
