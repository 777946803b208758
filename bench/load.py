"""Load for the ingest figures: wrk with a JSON body, and Claude Code's hook route driven
as many agents drive it (each tool call an event of its own)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import tempfile
import uuid
from typing import Any

import httpx

# Claude Code's native hook body for a finished tool call, as Claude Code sends it
# (shape of a recorded payload); each request gets a tool_use_id of its own, since a
# repeated one is a redelivery, answered from the log.
CLAUDE_POST_TOOL_USE = {
    "session_id": "7c1e4a52-5d0b-4b8e-9a51-3f0c2d6e8b17",
    "transcript_path": "/home/dev/.claude/projects/-home-dev-repo/7c1e4a52.jsonl",
    "cwd": "/home/dev/repo",
    "permission_mode": "acceptEdits",
    "hook_event_name": "PostToolUse",
    "tool_name": "Write",
    "tool_input": {"file_path": "/home/dev/repo/notes.txt", "content": "hello\n"},
    "tool_response": {
        "type": "create",
        "filePath": "/home/dev/repo/notes.txt",
        "content": "hello\n",
        "structuredPatch": [],
        "originalFile": None,
        "userModified": False,
    },
    "tool_use_id": "UNIQUE",
    "duration_ms": 2,
}


def wrk(
    url: str,
    body: dict[str, Any],
    seconds: int,
    connections: int = 16,
    unique: str | None = None,
    pause_ms: float | None = None,
) -> dict[str, float]:
    """Run wrk with a JSON POST; return requests/s and error counts.

    `unique`: a string of the body that every request replaces with a value of its own.
    `pause_ms`: each connection waits this long on average after an answer before its
    next request, so the load is paced (many exporters each sending now and then)
    instead of the server's saturation.
    """
    text = json.dumps(body)
    lua = 'wrk.method = "POST"\nwrk.headers["Content-Type"] = "application/json"\n'
    if unique is None:
        lua += f"wrk.body = {json.dumps(text)}\n"
    else:
        assert text.count(unique) == 1, unique
        before, after = text.split(unique)
        lua += (
            # `tag` is a global of each thread's own Lua state, set from the main one:
            # this run's own prefix (wrk's random numbers repeat from run to run) and
            # the thread's number.
            f"local threads = 0\nlocal run = {json.dumps(uuid.uuid4().hex)}\n"
            "function setup(thread)\n"
            "  threads = threads + 1\n"
            '  thread:set("tag", run .. "-" .. threads)\n'
            "end\n"
            f"local before, after, n = {json.dumps(before)}, {json.dumps(after)}, 0\n"
            "request = function()\n"
            "  n = n + 1\n"
            '  return wrk.format(nil, nil, nil, before .. tag .. "-" .. n .. after)\n'
            "end\n"
        )
    if pause_ms is not None:
        # Drawn afresh each time (uniform, mean `pause_ms`): fixed pauses let the
        # connections fall into step and arrive as bursts, which no fleet does.
        lua += f"delay = function() return math.random(0, {round(2 * pause_ms)}) end\n"
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as script:
        script.write(lua)
    try:
        out = subprocess.run(
            ["wrk", "-t2", f"-c{connections}", f"-d{seconds}s", "-s", script.name, url],
            capture_output=True,
            text=True,
            timeout=seconds + 60,
            check=True,
        ).stdout
    finally:
        os.unlink(script.name)
    rate = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))  # type: ignore[union-attr]
    done = int(re.search(r"(\d+) requests in", out).group(1))  # type: ignore[union-attr]
    bad = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", out)
    errors = re.search(r"Socket errors:.*", out)
    return {
        "rps": rate,
        "requests": float(done),
        "non2xx": float(bad.group(1)) if bad else 0.0,
        "socket_errors": 1.0 if errors else 0.0,
    }


def acknowledged_position(acknowledged: httpx.Response) -> int:
    acknowledged.raise_for_status()
    return int(acknowledged.headers["x-tachograph-position"])


def claude_hooks(base: str, seconds: int) -> dict[str, Any]:
    """Claude Code's native hook route, as many agents call it: each tool call a new event."""
    url = f"{base}/hooks/claude"
    first = httpx.post(url, json={**CLAUDE_POST_TOOL_USE, "tool_use_id": "first"})
    before = acknowledged_position(
        first
    )  # also creates the session, so the run measures ingest only
    wrk(url, CLAUDE_POST_TOOL_USE, 2, unique="UNIQUE")  # warm-up
    started = acknowledged_position(
        httpx.post(url, json={**CLAUDE_POST_TOOL_USE, "tool_use_id": "start"})
    )
    measured = wrk(url, CLAUDE_POST_TOOL_USE, seconds, unique="UNIQUE")
    end = acknowledged_position(
        httpx.post(url, json={**CLAUDE_POST_TOOL_USE, "tool_use_id": "end"})
    )
    stored = end - started - 1
    acknowledged = measured["requests"] - measured["non2xx"]
    assert before < started and stored >= acknowledged, (stored, measured)
    return {
        "workload": (
            f"POST /hooks/claude, Claude Code PostToolUse bodies (each its own tool_use_id), "
            f"no handlers, wrk 16 connections x {seconds} s"
        ),
        "events_per_s": measured["rps"],
        "errors": measured["non2xx"],
        "acknowledged": acknowledged,
        "stored": stored,
    }
