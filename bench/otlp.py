"""The OTLP receiver's throughput: Claude Code's log exports, as it sends them.

Each request is one `POST /v1/logs` of the shape Claude Code 2.1.328 exports after a
model request (tests/fixtures/otlp/): its `claude_code.api_request` record, which is
recorded, beside a `claude_code.tool_result` record, which is read and ignored. Every
request reports a request of its own (its `prompt.id` differs), so each one appends;
the session exists, created by a SessionStart hook first, as in a governed run.
"""

from __future__ import annotations

import copy
import json
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

import httpx

from bench.gateway import gateway_turn, overhead, percentiles, policy_handler
from bench.servers import Store, free_port, serve

FIXTURE: Final = (
    Path(__file__).resolve().parents[1]
    / "tests"
    / "fixtures"
    / "otlp"
    / "claude-code-2.1.328-logs.json"
)
NATIVE: Final = "330b8d74-e30b-49cd-b39d-9a1f57f5d9a9"
UNIQUE: Final = "UNIQUE-PROMPT-ID"
# Many exporters at once: each export waits ~10 ms to commit with others
# (ingest/usage.py), so the receiver's capacity needs this many in flight to show.
CONNECTIONS: Final = 64
# Beside the hooks, the exporters of a large fleet: each of 40 sends again 25 ms after
# its answer, about 1,000 exports/s offered, rather than a few saturating the server.
BESIDE_CONNECTIONS: Final = 40
BESIDE_PAUSE_MS: Final = 25.0


def export_body() -> dict[str, Any]:
    """One api_request and one tool_result record of the captured export; the request's
    prompt id is the placeholder wrk replaces per request."""
    export: dict[str, Any] = json.loads(FIXTURE.read_text())
    logs = export["resourceLogs"][0]["scopeLogs"][0]
    records = logs["logRecords"]
    request = copy.deepcopy(next(r for r in records if _event(r) == "claude_code.api_request"))
    result = next(r for r in records if _event(r) == "claude_code.tool_result")
    for attribute in request["attributes"]:
        if attribute["key"] == "prompt.id":
            attribute["value"] = {"stringValue": UNIQUE}
    logs["logRecords"] = [request, result]
    return export


def _recorded(base: str) -> int:
    """Model requests in the usage read model (waiting until it has caught up: 10 s)."""
    for _ in range(100):
        health = httpx.get(f"{base}/api/health").json()
        if all(p["lag"] == 0 for p in health["projections"].values()):
            break
        time.sleep(0.1)
    items = httpx.get(f"{base}/api/usage", params={"groupBy": "agent"}).json()["items"]
    return sum(int(item["requests"]) for item in items)


def _event(record: dict[str, Any]) -> str:
    return str(record["body"]["stringValue"])


def bench_otlp(
    store: Store, seconds: int, work: Path, *, wrk: Callable[..., dict[str, float]]
) -> dict[str, Any]:
    """`wrk`: bench/run.py's load generator (handed in: bench/run.py imports this module).

    The same loads on the main port (the receiver beside the hooks, in serve's process)
    and on TACHOGRAPH_OTLP_PORT (the receiver in a process of its own)."""
    port, own_port = free_port(), free_port()
    with (
        policy_handler() as (hook_url, extra),
        serve(
            store, port, work / "serve-otlp.log", {**extra, "TACHOGRAPH_OTLP_PORT": str(own_port)}
        ),
        httpx.Client() as http,
    ):
        base = f"http://127.0.0.1:{port}"
        hook = {"session_id": NATIVE, "hook_event_name": "SessionStart", "source": "startup"}
        httpx.post(f"{base}/hooks/claude", json=hook).raise_for_status()
        figures = {}
        for name, url in (
            ("main_port", f"{base}/v1/logs"),
            ("own_process", f"http://127.0.0.1:{own_port}/v1/logs"),
        ):
            figures[name] = _receiver_figures(http, base, hook_url, url, seconds, wrk)
    return {
        "workload": (
            f"POST /v1/logs, Claude Code's export shape, wrk {CONNECTIONS} connections"
            f" x {seconds} s; then {BESIDE_CONNECTIONS} paced exporters beside the gateway;"
            " on serve's port, then on the receiver's own (TACHOGRAPH_OTLP_PORT)"
        ),
        **figures,
    }


def _receiver_figures(
    http: httpx.Client,
    base: str,
    hook_url: str,
    url: str,
    seconds: int,
    wrk: Callable[..., dict[str, float]],
) -> dict[str, Any]:
    body = export_body()
    wrk(url, body, 2, connections=CONNECTIONS, unique=UNIQUE)  # warm-up
    before = _recorded(base)
    measured = wrk(url, body, seconds, connections=CONNECTIONS, unique=UNIQUE)
    recorded = _recorded(base) - before
    return {
        "requests_per_s": measured["rps"],
        "errors": measured["non2xx"],
        "acknowledged": measured["requests"] - measured["non2xx"],
        # Every acknowledged export recorded its one model request.
        "model_requests_recorded": recorded,
        "beside_hooks": _gateway_beside_exports(http, base, hook_url, url, body, seconds, wrk),
    }


def _gateway_beside_exports(
    http: httpx.Client,
    base: str,
    hook_url: str,
    url: str,
    body: dict[str, Any],
    seconds: int,
    wrk: Callable[..., dict[str, float]],
) -> dict[str, Any]:
    """The gateway's figures alone, then while a fleet's exporters post exports (paced,
    about 1,000/s): whether hooks keep their figures while the receiver takes them."""
    session = http.post(f"{base}/api/sessions", json={"workspaceId": "default"}).json()["id"]
    events = f"{base}/api/sessions/{session}/events"
    n = 50 * seconds
    gateway_turn(http, events, hook_url, 50)  # warm
    alone = overhead(*(percentiles(s) for s in gateway_turn(http, events, hook_url, n)))
    done: dict[str, dict[str, float]] = {}
    load = threading.Thread(
        target=lambda: done.update(
            r=wrk(
                url,
                body,
                seconds,
                connections=BESIDE_CONNECTIONS,
                unique=UNIQUE,
                pause_ms=BESIDE_PAUSE_MS,
            )
        )
    )
    load.start()
    time.sleep(0.5)  # the exports are flowing
    through, direct = gateway_turn(http, events, hook_url, n)
    load.join()
    beside = overhead(percentiles(through), percentiles(direct))
    return {
        "exports_per_s": done["r"]["rps"],
        "export_errors": done["r"]["non2xx"],
        "gateway_overhead_alone_ms": alone,
        "gateway_overhead_beside_ms": beside,
    }
