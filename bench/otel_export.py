"""The cost of exporting hook decisions as OpenTelemetry spans: the same server measured
with export off and on (against a stand-in collector on loopback), in turns, for the
ingest rate of Claude Code's hook route and the hook gateway's overhead; and the export
thread's CPU per decision (building and encoding its span), in each OTLP encoding."""

from __future__ import annotations

import re
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx

from bench.gateway import gateway_turn, overhead, percentiles, policy_handler
from bench.load import claude_hooks
from bench.servers import Store, free_port, serve
from domain.hook_dispatch import PASS, Decision, HandlerRun
from domain.lifecycle import LifecycleEvent
from infra.decision_export import Decided, decision_span
from infra.decision_spans import SPAN_NAME
from infra.otlp_spans import json_encoder, protobuf_encoder

_EXPORTED = re.compile(r"^tachograph_otel_decisions_exported_total (\S+)$", re.M)
_DROPPED = re.compile(r'^tachograph_otel_decisions_dropped_total\{reason="(\w+)"\} (\S+)$', re.M)


class _Collector(BaseHTTPRequestHandler):
    """Takes every OTLP request unread beyond its body: an empty protobuf answer is a
    valid ExportTraceServiceResponse."""

    def do_POST(self) -> None:  # noqa: N802
        self.rfile.read(int(self.headers.get("content-length", "0")))
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@contextmanager
def stand_in_collector() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Collector)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def bench_otel_export(store: Store, seconds: int, work: Path, rounds: int = 2) -> dict[str, Any]:
    """Export off and on, `rounds` times each in turns: events/s of Claude Code's route
    (wrk) and the gateway's p50/p99 overhead over one loopback handler."""

    rates: dict[str, list[float]] = {"off": [], "on": []}
    gateway: dict[str, list[dict[str, float]]] = {"off": [], "on": []}
    counted: dict[str, float] = {}
    with stand_in_collector() as collector, policy_handler(["Bash"]) as (hook_url, hooks):
        for turn in range(rounds * 2):
            mode = "off" if turn % 2 == 0 else "on"
            env = {**hooks, "OTEL_BSP_SCHEDULE_DELAY": "200"}
            if mode == "on":
                env["OTEL_EXPORTER_OTLP_ENDPOINT"] = collector
            port = free_port()
            with serve(store, port, work / f"serve-otel-{turn}.log", env), httpx.Client() as http:
                base = f"http://127.0.0.1:{port}"
                rates[mode].append(claude_hooks(base, seconds)["events_per_s"])
                made = http.post(f"{base}/api/sessions", json={"workspaceId": "default"})
                url = f"{base}/api/sessions/{made.json()['id']}/events"
                gateway_turn(http, url, hook_url, 20)  # warm both paths
                through, direct = gateway_turn(http, url, hook_url, 100 * seconds)
                gateway[mode].append(overhead(percentiles(through), percentiles(direct)))
                if mode == "on":
                    counted = _export_counts(http.get(f"{base}/metrics").text)
    off, on = max(rates["off"]), max(rates["on"])
    return {
        "workload": (
            f"Claude Code PostToolUse bodies, wrk 16 connections x {seconds} s, and "
            f"{100 * seconds} gateway PreToolUse dispatches, export off and on in turns "
            f"({rounds} each), stand-in collector on loopback"
        ),
        "claude_events_per_s_off": off,
        "claude_events_per_s_on": on,
        "ingest_ratio_on_vs_off": on / off,
        "gateway_overhead_p50_ms": {m: min(g["p50"] for g in gateway[m]) for m in gateway},
        "gateway_overhead_p99_ms": {m: min(g["p99"] for g in gateway[m]) for m in gateway},
        "spans": counted,
        "export_cpu_us_per_decision": export_cpu_per_decision(),
    }


def typical_decisions(count: int) -> list[tuple[Decided, str | None]]:
    """Claude Code PreToolUse decisions as the export thread sees them: a third denied by a
    handler with a reason, the rest passed; half in a runtime's trace; all chained."""
    refused = "writes outside the repository are refused"
    deny = Decision("deny", reason=refused, runs=(HandlerRun("no-etc", "deny", None, refused, 3),))
    items: list[tuple[Decided, str | None]] = []
    for n in range(count):
        trace = f"00-{uuid.uuid4().hex}-{uuid.uuid4().hex[:16]}-01" if n % 2 else None
        ev = LifecycleEvent(
            event="PreToolUse",
            turn_id=str(uuid.uuid4()),
            agent="claude-code",
            agent_session_id=str(uuid.uuid4()),
            tool_name="Bash",
            tool_call_id=f"toolu_{uuid.uuid4().hex[:24]}",
            trace_parent=trace,
        )
        decision = deny if n % 3 == 0 else PASS
        received = datetime.now(UTC)
        item = (uuid.uuid4(), ev, uuid.uuid4(), decision, 1000 + n, received, time.time_ns())
        items.append((item, uuid.uuid4().hex * 2))
    return items


def export_cpu_per_decision(count: int = 1000, batch: int = 512) -> dict[str, float]:
    """µs of CPU (one thread, best of 5) to turn `count` decisions into OTLP request bodies
    of `batch` spans, per decision, in each encoding."""
    items = typical_decisions(count)
    resource = {"service.name": "tachograph"}
    figures = {}
    for protocol, make in (("http/protobuf", protobuf_encoder), ("http/json", json_encoder)):
        encode = make(resource, SPAN_NAME)
        best = float("inf")
        for _ in range(5):
            started = time.process_time()
            for first in range(0, count, batch):
                encode([decision_span(item, link) for item, link in items[first : first + batch]])
            best = min(best, time.process_time() - started)
        figures[protocol] = round(best / count * 1e6, 1)
    return figures


def _export_counts(metrics: str) -> dict[str, float]:
    """What the last server with export on counted: exported, and dropped by reason."""
    counts = {f"dropped_{reason}": float(v) for reason, v in _DROPPED.findall(metrics)}
    exported = _EXPORTED.search(metrics)
    counts["exported"] = float(exported.group(1)) if exported else 0.0
    return counts
