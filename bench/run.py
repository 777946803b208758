"""`tachograph bench`: each figure beside a baseline measured in the same run (SPEC §12)."""

from __future__ import annotations

import json
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import httpx

from bench.gateway import (
    gateway_turn,
    overhead,
    percentiles,
    policy_handler,
    timed_alternately,
    with_starter_policy,
)
from bench.ingest import (
    EVENT_BODY,
    FACTS_PAIRS,
    INGEST_PAIRS,
    bench_facts_vs_metadata,
    bench_ingest,
)
from bench.load import wrk
from bench.servers import Store, free_port, serve


def bench_hook_gateway(store: Store, n: int, work: Path) -> dict[str, Any]:
    port = free_port()
    with (
        policy_handler() as (hook_url, extra),
        serve(store, port, work / "serve-gateway.log", extra),
        httpx.Client() as http,
    ):
        base = f"http://127.0.0.1:{port}"
        session = http.post(f"{base}/api/sessions", json={"workspaceId": "default"}).json()["id"]
        url = f"{base}/api/sessions/{session}/events"
        gateway_turn(http, url, hook_url, 50)  # warm both paths
        through, direct = gateway_turn(http, url, hook_url, n)
        ruled = with_starter_policy(http, base, hook_url, n, store.root / "workspace")
    gateway, handler_only = percentiles(through), percentiles(direct)
    over = overhead(gateway, handler_only)
    return {
        "workload": (
            f"{n} sequential PreToolUse dispatches, one loopback handler, "
            "each followed by one direct call of the handler"
        ),
        "gateway": gateway,
        "handler_direct": handler_only,
        "overhead_p50_ms": over["p50"],
        "overhead_p99_ms": over["p99"],
        "starter_policy": ruled,
    }


def bench_read_your_writes(store: Store, n: int, work: Path) -> dict[str, Any]:
    port = free_port()
    with serve(store, port, work / "serve-ryw.log"), httpx.Client() as http:
        base = f"http://127.0.0.1:{port}"
        session = http.post(f"{base}/api/sessions", json={"workspaceId": "default"}).json()["id"]
        events, hooks = (
            f"{base}/api/sessions/{session}/events",
            f"{base}/api/sessions/{session}/hooks",
        )
        visible, plain = [], []
        for _ in range(n):
            acked = http.post(events, json=EVENT_BODY)
            position = acked.headers["x-tachograph-position"]
            started = time.perf_counter()
            http.get(hooks, params={"minPosition": position, "limit": 1})
            visible.append(time.perf_counter() - started)
            started = time.perf_counter()
            http.get(hooks)
            plain.append(time.perf_counter() - started)
    return {
        "workload": f"{n} x (ingest, then GET its audit with minPosition)",
        "visible_after_ack_median_ms": statistics.median(visible) * 1000,
        "plain_get_median_ms": statistics.median(plain) * 1000,
        "wait_median_ms": (statistics.median(visible) - statistics.median(plain)) * 1000,
    }


def _services(store: Store) -> Any:
    from bootstrap import build_services
    from infra.settings import Settings

    return build_services(Settings.from_env(store.env()))


def _fill_tasks(store: Store, tasks: int, activity: int) -> None:
    """Tasks that ran one attempt each, with `activity` records in their transcripts."""
    from domain.task_service import TaskService

    services = _services(store)
    try:
        service = TaskService(services.app)
        for i in range(tasks):
            task_id = service.create("default", f"bench task {i}", None, 3, "bench").aggregate_id
            claim = service.claim(task_id, "bench")
            assert claim is not None
            if activity:
                records = [
                    {"kind": "text", "text": f"step {n} of task {i}: " + "x" * 80}
                    for n in range(activity)
                ]
                service.append_activity(claim.transcript, records)
            service.complete(task_id, claim.attempt, "done")
        services.runner.catch_up()
    finally:
        services.close()


BOARD_REQUESTS = 100


def bench_task_board(store: Store, tasks: int, work: Path) -> dict[str, Any]:
    plain = Store(store.kind, store.pg_url, store.root.with_name(store.root.name + "-plain"))
    try:
        _fill_tasks(store, tasks, 256)
        _fill_tasks(plain, tasks, 0)
        # Both servers up at once and their requests taken in turns (as for the gateway):
        # one after the other, a burst of load from elsewhere moved one median only and
        # the ratio by ±0.2 between identical runs.
        ports = free_port(), free_port()
        with (
            serve(store, ports[0], work / "serve-board-with_activity.log"),
            serve(plain, ports[1], work / "serve-board-no_activity.log"),
            httpx.Client() as http,
        ):
            urls = [f"http://127.0.0.1:{port}/api/tasks" for port in ports]
            for _ in range(5):
                for url in urls:
                    http.get(url, params={"limit": 200})
            busy, idle = timed_alternately(
                partial(http.get, urls[0], params={"limit": 200}),
                partial(http.get, urls[1], params={"limit": 200}),
                BOARD_REQUESTS,
            )
        timings = {
            "with_activity": statistics.median(busy) * 1000,
            "no_activity": statistics.median(idle) * 1000,
        }
    finally:
        plain.drop()
    return {
        "workload": (
            f"GET /api/tasks?limit=200 x {BOARD_REQUESTS} on each store, in turns, "
            f"{tasks} tasks x 256 activity records"
        ),
        "median_ms": timings["with_activity"],
        "no_activity_median_ms": timings["no_activity"],
        "ratio": timings["with_activity"] / timings["no_activity"],
    }


REBUILD_ROUNDS = 3


def bench_rebuild(store: Store, events: int, work: Path) -> dict[str, Any]:
    from domain.session import Session
    from infra.log_reader import iter_events
    from projections.rebuild import drop_tables, rebuild
    from projections.registry import all_projections

    services = _services(store)
    try:
        app = services.app
        for start in range(0, events // 2, 500):
            batch = [
                Session(
                    workspace="default",
                    title=f"s{i}",
                    agent=None,
                    agent_session_id=None,
                    actor="bench",
                )
                for i in range(start, min(start + 500, events // 2))
            ]
            for session in batch:
                session.rename(f"renamed {session.title}", "bench")
            app.record(*batch)
        head = int(app.recorder.max_notification_id() or 0)
        # Alternated rounds, each figure the median of its rounds: on a shared 2-core
        # machine one pair of runs drifts by ±15%, and a drift then lands on one side only.
        scans, rebuilds = [], []
        for _ in range(REBUILD_ROUNDS):
            started = time.perf_counter()
            scanned = sum(1 for n in iter_events(app) if app.mapper.transcoder.decode(n.state))
            scans.append(scanned / (time.perf_counter() - started))
            # Every round starts as the first did: no rebuilt tables left to drop.
            for projection in all_projections(prefix="bench_"):
                drop_tables(services.store, projection)
            started = time.perf_counter()
            rebuilt = rebuild(app, services.store, all_projections(prefix="bench_"))
            rebuilds.append(rebuilt / (time.perf_counter() - started))
    finally:
        services.close()
    rebuild_rate, scan_rate = statistics.median(rebuilds), statistics.median(scans)
    return {
        "workload": (
            f"{head} events (sessions created and renamed) into every projection, "
            f"median of {REBUILD_ROUNDS} alternated rounds"
        ),
        "rebuild_events_per_s": rebuild_rate,
        "decode_scan_events_per_s": scan_rate,
        "ratio": rebuild_rate / scan_rate,
        "rounds": {"rebuild_events_per_s": rebuilds, "decode_scan_events_per_s": scans},
    }


def bench_activity_search(store: Store, rows: int, work: Path) -> dict[str, Any]:
    from fastapi.testclient import TestClient

    from api.app import create_app
    from bench.activity_search import QUERY_ROUNDS, load, measure, queries
    from infra.settings import Settings

    services = _services(store)
    try:
        load_s = load(services.store, rows)
    finally:
        services.close()
    with TestClient(create_app(Settings.from_env(store.env()))) as client:
        figures = measure(client, queries(rows))
    return {
        "workload": (
            f"GET /api/activity?limit=50 through the app, {len(figures)} queries in turns x "
            f"{QUERY_ROUNDS}, over {rows} recorded tool calls in 2000 sessions"
        ),
        "rows": rows,
        "load_s": load_s,
        "load_rows_per_s": rows / load_s,
        "queries": figures,
        "worst_p99_ms": max(q["p99_ms"] for q in figures.values()),
    }


def run_bench(
    stores: list[str], quick: bool, out: Path, pg_url: str, only: list[str] | None = None
) -> dict[str, Any]:
    """Run every benchmark (or those named in `only`) on each store; print a table; write
    the JSON result."""
    from rich.console import Console

    from bench.approvals_load import bench_pending_approvals
    from bench.bundle_verify import bench_bundle_verify
    from bench.hook_latency import bench_hook_latency
    from bench.merkle import bench_merkle
    from bench.otel_export import bench_otel_export
    from bench.otlp import bench_otlp
    from bench.policy_backtest import bench_policy

    console = Console()
    seconds, n = (3, 200) if quick else (10, 1000)
    tasks, events = (300, 20_000) if quick else (5000, 200_000)
    search_rows = 20_000 if quick else 1_000_000
    policy_calls = 10_000 if quick else 1_000_000
    benchmarks: list[tuple[str, Callable[[Store, int, Path], dict[str, Any]], int]] = [
        ("ingest", partial(bench_ingest, pairs=1 if quick else INGEST_PAIRS), seconds),
        (
            "facts_vs_metadata",
            partial(bench_facts_vs_metadata, pairs=2 if quick else FACTS_PAIRS),
            1 if quick else seconds // 2,
        ),
        ("hook_gateway", bench_hook_gateway, n),
        # The same ingest and gateway figures with decisions exported as spans, and without.
        ("otel_export", partial(bench_otel_export, rounds=1 if quick else 2), seconds),
        ("pending_approvals", bench_pending_approvals, 40 if quick else n),
        ("read_your_writes", bench_read_your_writes, n),
        ("task_board", bench_task_board, tasks),
        ("rebuild", bench_rebuild, events),
        # The Merkle tree's share of the runner's and of ingest's time per event.
        (
            "merkle",
            partial(bench_merkle, services_of=_services, ingest=partial(bench_ingest, pairs=1)),
            5000 if quick else 50_000,
        ),
        # An auditor's offline check of one session's evidence bundle.
        ("bundle_verify", partial(bench_bundle_verify, services_of=_services), 1000),
        ("activity_search", bench_activity_search, search_rows),
        ("policy", bench_policy, policy_calls),
        ("otlp", partial(bench_otlp, wrk=wrk), seconds),
        # Spawned hooks and one server on SQLite, whatever the store: measured once.
        (
            "hook_latency",
            partial(bench_hook_latency, install_tracekit=not quick),
            40 if quick else 200,
        ),
    ]
    unknown = sorted(set(only or ()) - {name for name, _, _ in benchmarks})
    if unknown:
        names = ", ".join(name for name, _, _ in benchmarks)
        raise SystemExit(f"tachograph bench: no benchmark {', '.join(unknown)} (there are {names})")
    benchmarks = [b for b in benchmarks if not only or b[0] in only]
    wrk_figures = {"ingest", "facts_vs_metadata", "otel_export", "otlp"}
    if shutil.which("wrk") is None and any(name in wrk_figures for name, _, _ in benchmarks):
        raise SystemExit("tachograph bench needs wrk (Debian package `wrk`) for the ingest figures")
    results: dict[str, Any] = {"quick": quick, "cpus": os.cpu_count(), "stores": {}}
    work = Path(tempfile.mkdtemp(prefix="tachograph-bench-"))
    for kind in stores:
        figures: dict[str, Any] = {}
        for name, fn, arg in benchmarks:
            if name == "hook_latency" and kind != "sqlite":
                continue
            store = Store(kind, pg_url, work / f"{kind}-{name}")
            console.print(f"[bold]{kind}[/bold] {name} ...")
            try:
                figures[name] = fn(store, arg, work)
            finally:
                store.drop()
            console.print_json(json.dumps(figures[name]))
        if figures:
            results["stores"][kind] = figures
    out.write_text(json.dumps(results, indent=2))
    console.print(f"results written to {out}")
    return results
