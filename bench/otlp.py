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
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

import httpx

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
    """`wrk`: bench/run.py's load generator (handed in: bench/run.py imports this module)."""
    port = free_port()
    with serve(store, port, work / "serve-otlp.log"):
        base = f"http://127.0.0.1:{port}"
        hook = {"session_id": NATIVE, "hook_event_name": "SessionStart", "source": "startup"}
        httpx.post(f"{base}/hooks/claude", json=hook).raise_for_status()
        url = f"{base}/v1/logs"
        body = export_body()
        wrk(url, body, 2, unique=UNIQUE)  # warm-up
        before = _recorded(base)
        measured = wrk(url, body, seconds, unique=UNIQUE)
        recorded = _recorded(base) - before
    return {
        "workload": f"POST /v1/logs, Claude Code's export shape, wrk 16 connections x {seconds} s",
        "requests_per_s": measured["rps"],
        "errors": measured["non2xx"],
        "acknowledged": measured["requests"] - measured["non2xx"],
        # Every acknowledged export recorded its one model request.
        "model_requests_recorded": recorded,
    }
