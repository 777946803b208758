"""The gateway's workload and its timing: a loopback policy handler that passes every
call, and series taken in turns so both halves see the same machine noise."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def setup(self) -> None:
        super().setup()
        # Without this, Nagle + delayed ACK add ~40 ms to every answer of http.server.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def do_POST(self) -> None:  # noqa: N802
        self.rfile.read(int(self.headers.get("content-length", "0")))
        body = b'{"schemaVersion": 1, "outcome": "pass"}'
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


def percentiles(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        "p50_ms": ordered[len(ordered) // 2] * 1000,
        "p99_ms": ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1000,
    }


def timed(call: Callable[[], object], n: int) -> list[float]:
    samples = []
    for _ in range(n):
        started = time.perf_counter()
        call()
        samples.append(time.perf_counter() - started)
    return samples


def timed_alternately(
    first: Callable[[], object], second: Callable[[], object], n: int
) -> tuple[list[float], list[float]]:
    """`n` timings of each, taken in turns, so both see the same spells of machine noise.

    Timed one after the other, a burst of load from elsewhere on a shared 2-core
    machine lands in one series only and moves its p99 by several milliseconds.
    """
    firsts: list[float] = []
    seconds: list[float] = []
    for _ in range(n):
        firsts.extend(timed(first, 1))
        seconds.extend(timed(second, 1))
    return firsts, seconds


# The gateway's workload: a PreToolUse that one loopback handler answers with a pass.
GATEWAY_BODY: dict[str, Any] = {
    "event": "PreToolUse",
    "toolName": "Bash",
    "toolInput": {"command": "ls"},
}
# The same call as the gateway sends it to the handler, for timing the handler alone.
GATEWAY_DIRECT_BODY = json.dumps(
    {"schemaVersion": 1, "event": "PreToolUse", "detail": GATEWAY_BODY}
)


@contextmanager
def policy_handler(matcher: list[str] | None = None) -> Iterator[tuple[str, dict[str, str]]]:
    """A loopback PreToolUse handler that passes every call: its URL, and the env that
    makes `serve` call it (for the tools in `matcher`, or all)."""
    handler = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    threading.Thread(target=handler.serve_forever, daemon=True).start()
    hook_url = f"http://127.0.0.1:{handler.server_address[1]}/policy"
    entry: dict[str, Any] = {"id": "policy", "type": "http", "url": hook_url}
    if matcher is not None:
        entry["matcher"] = matcher
    hooks = {"version": 1, "hooks": {"PreToolUse": [entry]}}
    env = {"TACHOGRAPH_HOOKS": json.dumps(hooks), "TACHOGRAPH_HOOK_ALLOW_INSECURE_LOOPBACK": "1"}
    try:
        yield hook_url, env
    finally:
        handler.shutdown()
        handler.server_close()


def gateway_turn(
    http: httpx.Client, url: str, hook_url: str, n: int, body: dict[str, Any] = GATEWAY_BODY
) -> tuple[list[float], list[float]]:
    """`n` gateway dispatches to the events route `url` (each must pass), each followed by
    one direct call of the handler at `hook_url`: the two series the overhead is made of."""

    def dispatch() -> None:
        answered = http.post(url, json=body)
        assert answered.json()["outcome"] == "pass", answered.text

    return timed_alternately(dispatch, lambda: http.post(hook_url, content=GATEWAY_DIRECT_BODY), n)


def overhead(gateway: dict[str, float], direct: dict[str, float]) -> dict[str, float]:
    """The gateway's p50 and p99 less the handler's own: what the gateway target bounds."""
    return {
        "p50": gateway["p50_ms"] - direct["p50_ms"],
        "p99": gateway["p99_ms"] - direct["p99_ms"],
    }


def with_starter_policy(
    http: httpx.Client, base: str, url: str, hook_url: str, n: int
) -> dict[str, Any]:
    """The same dispatches (with the runtime's cwd, as real calls carry it) without and
    with `tachograph policy init`'s starter document active, in alternating rounds: what
    judging every call against it adds."""
    starter = (Path(__file__).resolve().parents[1] / "cli" / "policy_starter.yaml").read_text()
    recorded = http.post(f"{base}/api/policy/revisions", json={"source": starter})
    recorded.raise_for_status()
    revision = recorded.json()["id"]
    body = {**GATEWAY_BODY, "cwd": "/home/dev/repo"}
    series: dict[bool, tuple[list[float], list[float]]] = {False: ([], []), True: ([], [])}
    for active in (False, True, False, True):
        if active:
            http.post(f"{base}/api/policy/revisions/{revision}/activate").raise_for_status()
        else:
            http.post(f"{base}/api/policy/remove", json={})  # 409 before the first activation
        gateway_turn(http, url, hook_url, 20, body)  # warm after the change
        through, direct = gateway_turn(http, url, hook_url, n // 2, body)
        series[active][0].extend(through)
        series[active][1].extend(direct)
    off, on = (percentiles(series[a][0]) for a in (False, True))
    over_on = overhead(on, percentiles(series[True][1]))
    return {
        "workload": "the same PreToolUse with a cwd, starter policy off and on, two rounds each",
        "gateway_off": off,
        "gateway_on": on,
        "policy_added_p50_ms": on["p50_ms"] - off["p50_ms"],
        "overhead_on_p50_ms": over_on["p50"],
        "overhead_on_p99_ms": over_on["p99"],
    }
