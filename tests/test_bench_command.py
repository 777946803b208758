"""`tachograph bench --quick` runs end to end and reports every SPEC §12 figure beside its baseline.

Correctness of the report, not speed: the figures themselves vary with the machine.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support import PG_URL


def test_quick_bench_reports_each_figure_beside_its_baseline(
    store_kind: str, tmp_path: Path
) -> None:
    out = tmp_path / "bench.json"
    ran = subprocess.run(
        [sys.executable, "-m", "cli.main", "bench", "--quick", "--store", store_kind]
        + ["--out", str(out)],
        env={**os.environ, "TACHOGRAPH_BENCH_DATABASE_URL": PG_URL},
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["quick"] is True and list(result["stores"]) == [store_kind]
    figures = result["stores"][store_kind]
    # Spawned hooks against one server on SQLite whatever the store: measured once.
    once = {"hook_latency"} if store_kind == "sqlite" else set()
    assert set(figures) == {
        "ingest",
        "hook_gateway",
        "pending_approvals",
        "read_your_writes",
        "task_board",
        "rebuild",
        "activity_search",
        "facts_vs_metadata",
        "otel_export",
        "policy",
        "otlp",
        "merkle",
        "bundle_verify",
        *once,
    }
    for name, figure in figures.items():
        assert figure["workload"], name  # every figure states its workload size
        assert name in ran.stdout  # and is printed as it is measured

    exported = figures["otel_export"]
    assert exported["claude_events_per_s_off"] > 0 and exported["claude_events_per_s_on"] > 0
    assert exported["spans"]["exported"] > 0  # the stand-in collector took the decisions
    assert set(exported["gateway_overhead_p99_ms"]) == {"off", "on"}
    cpu = exported["export_cpu_us_per_decision"]  # the export thread's work per decision
    assert set(cpu) == {"http/protobuf", "http/json"} and min(cpu.values()) > 0
    # The receiver on serve's port, then in its own process (TACHOGRAPH_OTLP_PORT).
    for where in ("main_port", "own_process"):
        otlp = figures["otlp"][where]
        assert otlp["errors"] == 0 and otlp["requests_per_s"] > 0
        # Every acknowledged export recorded its one model request.
        assert otlp["model_requests_recorded"] >= otlp["acknowledged"]
        beside = otlp["beside_hooks"]  # the gateway alone, then while exports flow
        assert beside["exports_per_s"] > 0 and beside["export_errors"] == 0
        assert set(beside["gateway_overhead_beside_ms"]) == {"p50", "p99"}

    merkle = figures["merkle"]  # the tree's upkeep beside the chain alone and ingest
    per_event = merkle["us_per_event"]  # the tree's cost is their difference (noisy in --quick)
    assert min(per_event[k] for k in ("chain_only", "chain_and_tree", "runner")) > 0
    assert merkle["tree_us_per_event"] == pytest.approx(
        per_event["chain_and_tree"] - per_event["chain_only"]
    )
    assert merkle["ingest_events_per_s"] > 0

    bundled = figures["bundle_verify"]  # an auditor's offline check of one session
    assert bundled["events"] >= 1000 and bundled["cli_verify_s"] > bundled["verify_s"]["best"] > 0

    held = figures["pending_approvals"]
    assert held["held"] == 200 and held["gateway_beside_held"]["p50_ms"] > 0
    assert held["gateway_idle"]["p50_ms"] > 0 and held["release_all_s"] > 0
    # The overhead is the dispatch less the handler's own time, as the gateway target has it.
    for turn in ("idle", "beside_held"):
        gateway, direct = held[f"gateway_{turn}"], held[f"handler_direct_{turn}"]
        assert held[f"overhead_{turn}_ms"]["p99"] == pytest.approx(
            gateway["p99_ms"] - direct["p99_ms"]
        )

    ingest = figures["ingest"]
    assert ingest["errors"] == 0 and ingest["acknowledged"] > 0
    assert ingest["stored"] >= ingest["acknowledged"]  # every acknowledged event is in the log
    # serve and the bare endpoint take their loads in pairs of turns: each figure is
    # the median of its rounds, each ratio the median of the pairs' ratios.
    rounds = ingest["rounds"]
    assert len(rounds["ingest"]) == len(rounds["bare"]) == len(rounds["claude"]) >= 1
    assert ingest["events_per_s"] == pytest.approx(statistics.median(rounds["ingest"]))
    assert ingest["bare_endpoint_per_s"] == pytest.approx(statistics.median(rounds["bare"]))
    assert ingest["ratio_vs_bare"] == pytest.approx(
        statistics.median(i / b for i, b in zip(rounds["ingest"], rounds["bare"], strict=True))
    )
    assert ingest["ratio_vs_raw_insert"] == pytest.approx(
        ingest["events_per_s"] / ingest["raw_insert_per_s"]
    )
    assert 0 < ingest["serve_peak_rss_mb"] < 4096
    claude = ingest["claude_hook"]  # Claude Code's native hook route, in the same server
    assert claude["workload"] and claude["errors"] == 0 and claude["acknowledged"] > 0
    assert claude["stored"] >= claude["acknowledged"]
    assert claude["events_per_s"] == pytest.approx(statistics.median(rounds["claude"]))
    assert claude["ratio_vs_ingest"] == pytest.approx(
        statistics.median(c / i for c, i in zip(rounds["claude"], rounds["ingest"], strict=True))
    )

    # The same loads on two servers side by side, one recording names only, in pairs.
    facts = figures["facts_vs_metadata"]
    for name, values in facts["rounds"].items():
        assert len(values) == 2 and all(v > 0 for v in values), name
        assert facts[name] == pytest.approx(statistics.median(values)), name
    rounds = facts["rounds"]
    for route, figure in (("ingest", "events_per_s"), ("claude", "claude_events_per_s")):
        pairs = [
            full / names
            for full, names in zip(
                rounds[f"full_{figure}"], rounds[f"metadata_{figure}"], strict=True
            )
        ]
        assert facts["pair_ratios"][route] == pytest.approx(pairs), route
        assert facts[f"{route}_ratio"] == pytest.approx(statistics.median(pairs)), route

    search = figures["activity_search"]
    assert search["rows"] == 20_000 and search["load_s"] > 0
    for query in search["queries"].values():
        assert 0 < query["p50_ms"] <= query["p99_ms"] <= search["worst_p99_ms"]
    assert search["queries"]["rare_text"]["items"] == 20  # one call in a thousand matches
    assert search["queries"]["no_match"]["items"] == 0

    policy = figures["policy"]
    backtest = policy["backtest"]
    assert backtest["evaluated"] == 10_000 and backtest["evaluated_per_s"] > 0
    assert 0 < backtest["evaluations"] <= backtest["evaluated"]
    # The force pushes and key reads among the calls are found and would be denied.
    assert backtest["hits"]["no-force-push"] > 0 and backtest["hits"]["no-key-files"] > 0
    assert backtest["changed"]["deny"] > 0
    assert 0 < policy["judge"]["p50_ms"] <= policy["judge"]["p99_ms"]

    gateway = figures["hook_gateway"]
    for series in (gateway["gateway"], gateway["handler_direct"]):
        assert 0 < series["p50_ms"] <= series["p99_ms"]
    assert gateway["overhead_p99_ms"] == pytest.approx(
        gateway["gateway"]["p99_ms"] - gateway["handler_direct"]["p99_ms"]
    )
    ruled = gateway["starter_policy"]  # pairs of calls, one judged by the starter document
    for series in (ruled["gateway_on"], ruled["gateway_off"]):
        assert 0 < series["p50_ms"] <= series["p99_ms"]
    added = [ruled[f"policy_added_{q}_ms"] for q in ("p25", "p50", "p75")]
    assert added == sorted(added) and added[0] < added[-1]

    ryw = figures["read_your_writes"]
    assert ryw["visible_after_ack_median_ms"] > 0 and ryw["plain_get_median_ms"] > 0

    board = figures["task_board"]
    assert board["ratio"] == pytest.approx(board["median_ms"] / board["no_activity_median_ms"])

    rebuild = figures["rebuild"]
    assert len(rebuild["rounds"]["rebuild_events_per_s"]) == 3
    assert len(rebuild["rounds"]["decode_scan_events_per_s"]) == 3
    assert rebuild["ratio"] == pytest.approx(
        rebuild["rebuild_events_per_s"] / rebuild["decode_scan_events_per_s"]
    )

    if store_kind == "sqlite":
        assert_hook_latency_shape(figures["hook_latency"])


def assert_hook_latency_shape(latency: dict[str, Any]) -> None:
    """Every contender timed `calls` times with no wrong answer; the ratios computed from
    the figures beside them. Tracekit is there, or says why not (no network in quick runs)."""
    assert latency["calls"] == 40
    assert set(latency["command_hooks"]) == {
        "claude", "codex", "gemini", "copilot", "qwen", "droid", "cline",
    }  # fmt: skip
    series = [
        *latency["command_hooks"].values(),
        latency["server_down"]["claude"],
        latency["cat"],
        latency["python_start"],
        latency["http"]["keep_alive"],
        latency["http"]["new_connection"],
    ]
    # OpenCode's and Kilo's plugin, where a JavaScript runtime is there to load it in.
    assert set(latency["plugin_hooks"]) <= {"opencode", "kilo"}
    series += latency["plugin_hooks"].values()
    for figure in series:
        assert 0 < figure["p50_ms"] <= figure["p99_ms"] and figure["errors"] == 0, figure
    target = latency["targets"]["http_p50_ms"]
    for kind, ratio in latency["http_p50_vs_target"].items():
        assert ratio == pytest.approx(latency["http"][kind]["p50_ms"] / target)
    tracekit = latency["tracekit"]
    if "unavailable" in tracekit:
        assert tracekit["unavailable"] and latency["p50_vs_tracekit"] == {}
        return
    assert 0 < tracekit["p50_ms"] <= tracekit["p99_ms"] and tracekit["errors"] == 0
    assert tracekit["version"] and "tracekit" in latency["commands"]["tracekit"]
    for runtime, ratio in latency["p50_vs_tracekit"].items():
        p50 = latency["command_hooks"][runtime]["p50_ms"]
        assert ratio == pytest.approx(p50 / tracekit["p50_ms"]), runtime
