"""Measure `verify` and `replay` over a large log, next to a raw scan of the same log.

    .venv/bin/python bench/log_integrity.py --events 200000 [--postgres URL]

Builds a fresh log (sessions created and renamed, many aggregates per transaction), lets
the projections catch up, then times: a raw scan of the stored events, `verify` (chain
recomputed and compared with every recorded link and checkpoint) and `replay` of every
projection (rebuild from 0 plus the row-by-row comparison).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bootstrap import Services, build_services  # noqa: E402
from domain.application import Tachograph  # noqa: E402
from domain.session import Session  # noqa: E402
from infra.log_scan import log_head, scan_events  # noqa: E402
from infra.settings import Settings  # noqa: E402
from projections.replay import replay  # noqa: E402
from services.log_audit import verify_log  # noqa: E402

KEY = "bench-signing-key-0123456789abcdef0123"


def bulk_history(app: Tachograph, sessions: int, per_save: int) -> int:
    """Two events per session (created, renamed), many aggregates per transaction."""
    for start in range(0, sessions, per_save):
        batch = [
            Session(
                workspace="default", title=f"s{i}", agent=None, agent_session_id=None, actor="bench"
            )
            for i in range(start, min(start + per_save, sessions))
        ]
        for session in batch:
            session.rename(f"renamed {session.title}", "bench")
        app.record(*batch)
    return int(app.recorder.max_notification_id() or 0)


@contextmanager
def scratch_services(default_events: int) -> Iterator[tuple[int, str, Services]]:
    """The command line's `--events` and store, and services over a fresh store there
    (a temporary data directory, a fresh schema with `--postgres`), removed afterwards."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--events", type=int, default=default_events)
    parser.add_argument("--postgres", metavar="URL", help="postgresql://... (default: SQLite)")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="tachograph-bench-"))
    (tmp / "workspace").mkdir()
    settings = Settings(data_dir=tmp / "data", workspace_root=tmp / "workspace")
    settings = settings.with_(log_signing_key=KEY)
    if args.postgres:
        url = Settings.from_env({"TACHOGRAPH_DATABASE_URL": args.postgres}).database_url
        settings = settings.with_(database_url=url, database_schema=f"b_{uuid.uuid4().hex[:8]}")
    services = build_services(settings)
    try:
        yield args.events, "postgres" if args.postgres else "sqlite", services
    finally:
        services.close()
        shutil.rmtree(tmp, ignore_errors=True)
        if settings.database_url is not None:
            import psycopg

            with psycopg.connect(settings.database_url.conninfo(), autocommit=True) as conn:
                conn.execute(f'DROP SCHEMA IF EXISTS "{settings.database_schema}" CASCADE')


def main() -> int:
    with scratch_services(200_000) as (events, store_name, services):
        started = time.perf_counter()
        head = bulk_history(services.app, events // 2, per_save=500)
        print(f"[{store_name}] wrote {head} events in {time.perf_counter() - started:.1f} s")
        started = time.perf_counter()
        services.runner.catch_up()
        took = time.perf_counter() - started
        print(f"[{store_name}] live projections caught up: {took:.1f} s ({head / took:,.0f} ev/s)")

        started = time.perf_counter()
        scanned = sum(1 for _ in scan_events(services.app, log_head(services.app)))
        took = time.perf_counter() - started
        print(
            f"[{store_name}] raw scan:  {scanned} events in {took:.2f} s "
            f"({scanned / took:,.0f} ev/s)"
        )

        started = time.perf_counter()
        report = verify_log(services.app, services.store, KEY)
        took = time.perf_counter() - started
        print(
            f"[{store_name}] verify:    {report.events} events in {took:.2f} s "
            f"({report.events / took:,.0f} ev/s), ok={report.ok}, "
            f"{report.checkpoints_checked} checkpoints"
        )

        started = time.perf_counter()
        reports = replay(services.app, services.store, services.projections)
        took = time.perf_counter() - started
        drift = [r.name for r in reports if r.drift]
        print(
            f"[{store_name}] replay:    {head} events x {len(reports)} projections in {took:.2f} s "
            f"({head / took:,.0f} ev/s), drift={drift}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
