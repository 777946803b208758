"""The ingest figures: the generic ingest route and Claude Code's route beside a bare
endpoint, and the same loads recording facts or names only, each load in turns.

Measured one after the other, two runs of the same code differ by ±20% on a shared
2-core machine, and a burst from elsewhere can last longer than one load: one ingest
load followed by one bare load read 0.40×, 0.53× and 0.58× of the bare endpoint in
three runs of the same commit within ten minutes. So the servers of a comparison run
side by side and take their loads in pairs of turns, every other pair in the other
order, and a ratio is the median of the pairs' ratios: a slow stretch lands on both
halves of a pair, and an order effect on half the pairs each way. Before each load the
read models have applied the whole log and every process is idle, so no load pays for
the one before it.
"""

from __future__ import annotations

import os
import statistics
import time
from pathlib import Path
from typing import Any

import httpx

from bench.load import CLAUDE_POST_TOOL_USE, acknowledged_position, wrk
from bench.servers import Store, baseline, free_port, serve

EVENT_BODY = {
    "event": "PostToolUse",
    "toolName": "Bash",
    "toolCallId": "call-1",
    "toolInput": {"command": "ls -la"},
    "toolResponse": {"stdout": "README.md\n", "exitCode": 0},
}

INGEST_PAIRS = 4
# The loads on `serve`, each checked against the log; the third is the bare endpoint.
SERVE_LOADS = ("ingest", "claude")
FACTS_PAIRS = 8
# Each route of the facts benchmark and the suffix of its events/s figures.
_FACTS_ROUTES = (("ingest", "events_per_s"), ("claude", "claude_events_per_s"))


def peak_rss_mb(pid: int) -> float:
    """Peak resident set size (VmHWM) of a process, in MB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def bench_ingest(
    store: Store, seconds: int, work: Path, pairs: int = INGEST_PAIRS
) -> dict[str, Any]:
    """`serve` (ingest route and Claude Code's route) beside the bare endpoint, in turns.

    Each pair runs the three loads (ingest, Claude route, bare; the next pair in the
    other order). Every load on `serve` checks that the log grew by at least as many
    events as wrk counted 2xx answers.
    """
    port, bare_port = free_port(), free_port()
    rounds: dict[str, list[float]] = {"ingest": [], "claude": [], "bare": []}
    # What each load on `serve` was answered and what the log holds of it.
    tally = {route: {"errors": 0.0, "acknowledged": 0.0, "stored": 0} for route in SERVE_LOADS}
    with (
        serve(store, port, work / "serve-ingest.log") as proc,
        baseline("bare_app", bare_port, {}, work / "bare.log") as bare_proc,
    ):
        base = f"http://127.0.0.1:{port}"
        session = httpx.post(f"{base}/api/sessions", json={"workspaceId": "default"}).json()["id"]
        ingest_url = f"{base}/api/sessions/{session}/events"
        claude_url = f"{base}/hooks/claude"
        bare_url = f"http://127.0.0.1:{bare_port}/api/sessions/x/events"
        # The first Claude call creates its session, so the loads measure ingest only.
        acknowledged_position(
            httpx.post(claude_url, json={**CLAUDE_POST_TOOL_USE, "tool_use_id": "first"})
        )
        loads: dict[str, tuple[str, dict[str, Any], str | None]] = {
            "ingest": (ingest_url, EVENT_BODY, None),
            "claude": (claude_url, CLAUDE_POST_TOOL_USE, "UNIQUE"),
            "bare": (bare_url, EVENT_BODY, None),
        }
        for url, body, unique in loads.values():
            wrk(url, body, 2, unique=unique)  # warm-up
        pids = [proc.pid, *children(proc.pid), bare_proc.pid]
        for pair in range(pairs):
            order = ["ingest", "claude", "bare"]
            for route in order if pair % 2 == 0 else reversed(order):
                _settle({"serve": base})
                _quiet(pids)
                url, body, unique = loads[route]
                if route not in SERVE_LOADS:
                    rounds[route].append(wrk(url, body, seconds)["rps"])
                    continue
                before = _position(route, url, f"before-{pair}")
                measured = wrk(url, body, seconds, unique=unique)
                stored = _position(route, url, f"after-{pair}") - before - 1
                rounds[route].append(measured["rps"])
                acknowledged = measured["requests"] - measured["non2xx"]
                assert stored >= acknowledged, (route, stored, measured)
                tally[route]["errors"] += measured["non2xx"]
                tally[route]["acknowledged"] += acknowledged
                tally[route]["stored"] += stored
        rss = peak_rss_mb(proc.pid)
    raw = _raw_insert(store, seconds, work)
    median = {route: statistics.median(values) for route, values in rounds.items()}
    # Round n of each load is pair n: its loads were measured back to back.
    pair_ratios = {
        "ingest_vs_bare": [i / b for i, b in zip(rounds["ingest"], rounds["bare"], strict=True)],
        "claude_vs_ingest": [
            c / i for c, i in zip(rounds["claude"], rounds["ingest"], strict=True)
        ],
    }
    workload = f"wrk 16 connections x {seconds} s, {pairs} pairs of turns with the bare endpoint"
    return {
        "workload": f"POST PostToolUse, no handlers, {workload}",
        "events_per_s": median["ingest"],
        **tally["ingest"],
        "bare_endpoint_per_s": median["bare"],
        "raw_insert_per_s": raw,
        "ratio_vs_bare": statistics.median(pair_ratios["ingest_vs_bare"]),
        "ratio_vs_raw_insert": median["ingest"] / raw,
        "serve_peak_rss_mb": rss,
        "claude_hook": {
            "workload": (
                "POST /hooks/claude, Claude Code PostToolUse bodies (each its own "
                f"tool_use_id), no handlers, same server, {workload}"
            ),
            "events_per_s": median["claude"],
            **tally["claude"],
            "ratio_vs_ingest": statistics.median(pair_ratios["claude_vs_ingest"]),
        },
        "rounds": rounds,
        "pair_ratios": pair_ratios,
    }


def _position(route: str, url: str, marker: str) -> int:
    """The log position after one request of `route` on `serve`."""
    body = {**CLAUDE_POST_TOOL_USE, "tool_use_id": marker} if route == "claude" else EVENT_BODY
    return acknowledged_position(httpx.post(url, json=body))


def _raw_insert(store: Store, seconds: int, work: Path) -> float:
    """One raw INSERT + COMMIT per request: what the store alone allows."""
    raw_port = free_port()
    raw_env = (
        {"BENCH_DATABASE_URL": store.pg_url}
        if store.kind == "postgres"
        else {"BENCH_SQLITE_PATH": str(work / "raw.sqlite")}
    )
    with baseline("raw_insert_app", raw_port, raw_env, work / "raw.log"):
        raw_url = f"http://127.0.0.1:{raw_port}/api/sessions/x/events"
        wrk(raw_url, EVENT_BODY, 2)
        raw = wrk(raw_url, EVENT_BODY, seconds)
    if store.kind == "postgres":
        import psycopg

        with psycopg.connect(store.pg_url, autocommit=True) as conn:
            conn.execute("DROP TABLE IF EXISTS bench_raw")
    return raw["rps"]


def bench_facts_vs_metadata(
    store: Store, seconds: int, work: Path, pairs: int = FACTS_PAIRS
) -> dict[str, Any]:
    """The ingest and Claude-route loads on two servers side by side, in pairs of turns:
    one recording each call's facts (the default), one with TACHOGRAPH_RECORD=metadata.
    The events/s figures are each side's median.
    """
    names = Store(store.kind, store.pg_url, store.root.with_name(store.root.name + "-metadata"))
    rounds: dict[str, list[float]] = {
        "full_events_per_s": [],
        "metadata_events_per_s": [],
        "full_claude_events_per_s": [],
        "metadata_claude_events_per_s": [],
    }
    full_port, names_port = free_port(), free_port()
    try:
        with (
            serve(store, full_port, work / "serve-facts-full.log") as full_proc,
            serve(
                names,
                names_port,
                work / "serve-facts-metadata.log",
                {"TACHOGRAPH_RECORD": "metadata"},
            ) as names_proc,
        ):
            procs = [full_proc.pid, names_proc.pid]
            procs += [child for pid in procs for child in children(pid)]
            sides = {
                "full": f"http://127.0.0.1:{full_port}",
                "metadata": f"http://127.0.0.1:{names_port}",
            }
            loads: dict[str, dict[str, tuple[str, dict[str, Any], str | None]]] = {
                "ingest": {},
                "claude": {},
            }
            for side, base in sides.items():
                session = httpx.post(f"{base}/api/sessions", json={"workspaceId": "default"})
                url = f"{base}/api/sessions/{session.json()['id']}/events"
                loads["ingest"][side] = (url, EVENT_BODY, None)
                loads["claude"][side] = (f"{base}/hooks/claude", CLAUDE_POST_TOOL_USE, "UNIQUE")
                wrk(url, EVENT_BODY, 2)  # warm-up
                acknowledged_position(httpx.post(f"{base}/hooks/claude", json=CLAUDE_POST_TOOL_USE))
                wrk(f"{base}/hooks/claude", CLAUDE_POST_TOOL_USE, 2, unique="UNIQUE")
            for pair in range(pairs):
                order = ["full", "metadata"] if pair % 2 == 0 else ["metadata", "full"]
                for route, figure in _FACTS_ROUTES:
                    for side in order:
                        _settle(sides)
                        _quiet(procs)
                        url, body, unique = loads[route][side]
                        measured = wrk(url, body, seconds, unique=unique)
                        assert measured["non2xx"] == 0, measured
                        rounds[f"{side}_{figure}"].append(measured["rps"])
    finally:
        names.drop()
    median = {name: statistics.median(values) for name, values in rounds.items()}
    # Round n of each side is pair n: its two halves measured back to back.
    ratios = {
        route: [
            full / metadata
            for full, metadata in zip(
                rounds[f"full_{figure}"], rounds[f"metadata_{figure}"], strict=True
            )
        ]
        for route, figure in _FACTS_ROUTES
    }
    return {
        "workload": (
            f"ingest (PostToolUse) and Claude route (PostToolUse bodies, each its own "
            f"tool_use_id), no handlers, wrk 16 connections x {seconds} s, on a server "
            f"recording facts and one with TACHOGRAPH_RECORD=metadata side by side, "
            f"{pairs} pairs of turns (alternating which side goes first), ratio the median "
            f"of the pairs' ratios"
        ),
        **median,
        "ingest_ratio": statistics.median(ratios["ingest"]),
        "claude_ratio": statistics.median(ratios["claude"]),
        "pair_ratios": ratios,
        "rounds": rounds,
    }


def children(pid: int) -> list[int]:
    """The child processes of `pid` (serve's projections process)."""
    path = Path(f"/proc/{pid}/task/{pid}/children")
    return [int(c) for c in path.read_text().split()] if path.exists() else []


def _quiet(pids: list[int], timeout_s: float = 10.0) -> None:
    """Wait until the processes use under 5% of a core over a quarter second: a server
    that has applied its log still checkpoints its WAL and collects garbage after a
    load, and that would land on the next load, the other side's (measured: whichever
    side went second in a pair read ~10% slower)."""
    tick = os.sysconf("SC_CLK_TCK")

    def cpu_s() -> float:
        total = 0
        for pid in pids:
            stat = Path(f"/proc/{pid}/stat")
            if not stat.exists():
                continue
            fields = stat.read_text().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])  # utime, stime
        return total / tick

    if not Path("/proc/self/stat").exists():
        return
    deadline = time.monotonic() + timeout_s
    before = cpu_s()
    while time.monotonic() < deadline:
        time.sleep(0.25)
        now = cpu_s()
        if now - before < 0.05 * 0.25 * len(pids) + 1 / tick:
            return
        before = now


def _settle(bases: dict[str, str], timeout_s: float = 60.0) -> None:
    """Wait until every server's projections have applied its whole log."""
    deadline = time.monotonic() + timeout_s
    for base in bases.values():
        while True:
            projections = httpx.get(f"{base}/api/health").json()["projections"]
            if all(p["lag"] == 0 for p in projections.values()):
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"{base}: read models still behind after {timeout_s} s")
            time.sleep(0.1)
