"""Held approvals beside the hook gateway: do 200 requests waiting for an operator slow
the hooks that do not wait?

Measured in turns on one `serve`: the gateway workload of `bench_hook_gateway`
(PreToolUse through one loopback handler, each dispatch followed by a direct call of the
handler) with no request held, then with 200 Claude Code PreToolUse hooks held open on an
approval rule, then all 200 decided through the API (allow) and their answers checked;
twice. The gateway target (SPEC §12) is on the overhead, the dispatch's time less the
handler's own, so both series report it the way `bench_hook_gateway` does. Each waiting
request is an asyncio future on the server (ingest/held_approvals.py), not a thread.
"""

from __future__ import annotations

import json
import time
import uuid
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, Final

import httpx

from bench.gateway import gateway_turn, overhead, percentiles, policy_handler
from bench.servers import Store, free_port, serve

HELD: Final = 200
ROUNDS: Final = 2
# The held calls are another tool than the gateway's Bash, so the handler only ever
# sees the calls being measured.
HELD_TOOL: Final = "mcp__deploy__release"
RULES: Final = {
    "version": 1,
    "rules": [{"id": "bench-hold", "tool": HELD_TOOL, "timeoutS": 600}],
}


def held_body(n: int) -> dict[str, Any]:
    """A Claude Code PreToolUse the rule holds (each its own session and tool call)."""
    session = str(uuid.uuid4())
    return {
        "session_id": session,
        "transcript_path": f"/home/dev/.claude/projects/-repo/{session}.jsonl",
        "cwd": "/home/dev/repo",
        "hook_event_name": "PreToolUse",
        "tool_name": HELD_TOOL,
        "tool_input": {"target": f"release {n}"},
        "tool_use_id": f"toolu_{uuid.uuid4().hex[:20]}",
    }


def _pending(http: httpx.Client, base: str) -> list[dict[str, Any]]:
    found = http.get(f"{base}/api/approvals", params={"status": "pending", "limit": 500})
    return list(found.json()["items"])


def _hold(base: str, pool: ThreadPoolExecutor, http: httpx.Client) -> list[Future[httpx.Response]]:
    """Send HELD hooks that wait, and return once the server holds every one."""
    held = [
        pool.submit(httpx.post, f"{base}/hooks/claude", json=held_body(n), timeout=300)
        for n in range(HELD)
    ]
    deadline = time.monotonic() + 120
    while len(_pending(http, base)) < HELD:
        if time.monotonic() > deadline:
            raise RuntimeError("the server did not hold every request")
        time.sleep(0.1)
    return held


def _release(base: str, http: httpx.Client, held: list[Future[httpx.Response]]) -> float:
    """Allow every pending request; seconds until all held hooks were answered `{}`."""
    started = time.monotonic()
    for approval in _pending(http, base):
        decided = http.post(
            f"{base}/api/approvals/{approval['id']}/decide", json={"decision": "allow"}
        )
        assert decided.status_code == 200, decided.text
    for future in held:
        answer = future.result(120)
        assert answer.status_code == 200 and answer.json() == {}, answer.text
    return time.monotonic() - started


def bench_pending_approvals(store: Store, n: int, work: Path) -> dict[str, Any]:
    port = free_port()
    idle: list[float] = []
    idle_direct: list[float] = []
    loaded: list[float] = []
    loaded_direct: list[float] = []
    releases: list[float] = []
    per_turn = max(n // (2 * ROUNDS), 1)
    with policy_handler(matcher=["Bash"]) as (hook_url, extra):
        extra = {**extra, "TACHOGRAPH_APPROVALS": json.dumps(RULES)}
        with (
            serve(store, port, work / "serve-approvals.log", extra),
            httpx.Client(timeout=30) as http,
            ThreadPoolExecutor(HELD) as pool,
        ):
            base = f"http://127.0.0.1:{port}"
            session = http.post(f"{base}/api/sessions", json={"workspaceId": "default"})
            url = f"{base}/api/sessions/{session.json()['id']}/events"

            def gateway(samples: list[float], direct: list[float]) -> None:
                through, handler_only = gateway_turn(http, url, hook_url, per_turn)
                samples.extend(through)
                direct.extend(handler_only)

            gateway_turn(http, url, hook_url, 50)  # warm both paths
            for _ in range(ROUNDS):
                gateway(idle, idle_direct)
                held = _hold(base, pool, http)
                gateway(loaded, loaded_direct)
                releases.append(_release(base, http, held))
    without, beside = percentiles(idle), percentiles(loaded)
    without_direct, beside_direct = percentiles(idle_direct), percentiles(loaded_direct)
    return {
        "workload": (
            f"{len(idle) + len(loaded)} sequential PreToolUse dispatches through one loopback "
            "handler, each followed by one direct call of the handler, "
            f"in turns of {per_turn}: with no request held, then beside {HELD} "
            f"Claude Code PreToolUse hooks held open on an approval rule; then the {HELD} "
            f"allowed through the API and their answers checked; {ROUNDS} rounds"
        ),
        "held": HELD,
        "gateway_idle": without,
        "gateway_beside_held": beside,
        "handler_direct_idle": without_direct,
        "handler_direct_beside_held": beside_direct,
        "overhead_idle_ms": overhead(without, without_direct),
        "overhead_beside_held_ms": overhead(beside, beside_direct),
        "p99_ratio": beside["p99_ms"] / without["p99_ms"],
        "release_all_s": max(releases),
    }
