"""Verifying an evidence bundle offline: what an auditor's `tachograph verify --bundle`
costs for one session of 1,000 events.

The session is recorded as a runtime records one (a SessionStart, then PreToolUse hook
events, each a dispatch of its own), the bundle is exported as `tachograph export
--bundle` builds it, and it is checked with the function `verify --bundle` runs (the
note's signature, then each event's leaf and inclusion proof), best and median of a
few runs; then once through the CLI in a new process, with no data directory, as an
auditor runs it (interpreter start-up included).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from uuid import UUID

RUNS = 5


def bench_bundle_verify(
    store: Any, events: int, work: Path, *, services_of: Callable[[Any], Any]
) -> dict[str, Any]:
    """`services_of`: bench/run.py's (handed in: bench/run.py imports this module)."""
    from fastapi.testclient import TestClient

    from api.app import create_app
    from infra.settings import Settings
    from projections.log_tree import sign_log_head
    from services.log_bundle import build_bundle, verify_bundle

    settings = Settings.from_env(store.env())
    with TestClient(create_app(settings)) as client:
        session = client.post("/api/sessions", json={"workspaceId": "default"}).json()["id"]
        url = f"/api/sessions/{session}/events"
        client.post(url, json={"event": "SessionStart", "agent": "claude-code"})
        for n in range(events - 2):  # with the session's own events: about `events`
            call = {"command": f"pytest tests/test_{n}.py -q", "description": "run a test"}
            body = {"event": "PreToolUse", "toolName": "Bash", "toolInput": call}
            client.post(url, json={**body, "toolCallId": f"call-{n}", "turnId": "t1"})
    services = services_of(store)
    try:
        services.runner.catch_up()
        bundle = build_bundle(
            services.app,
            services.store,
            UUID(session),
            lambda: sign_log_head(services.projections, services.store),
        )
        key = services.note_key.verifier_key
    finally:
        services.close()
    text = json.dumps(bundle, indent=1)
    path = work / "bundle.json"
    path.write_text(text + "\n", encoding="utf-8")
    timings = []
    for _ in range(RUNS):
        started = time.perf_counter()
        report = verify_bundle(text, key)
        timings.append(time.perf_counter() - started)
    assert report.events == len(bundle["events"])
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "TACHOGRAPH_DATA_DIR": "/nonexistent"}
    started = time.perf_counter()
    cli = subprocess.run(
        [sys.executable, "-m", "cli.main", "verify", "--bundle", str(path), "--key", key],
        env=env,
        cwd=Path(__file__).resolve().parents[1],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    cli_s = time.perf_counter() - started
    assert cli.stdout.startswith("OK:"), cli.stdout
    return {
        "workload": (
            f"one session of {len(bundle['events'])} events (a SessionStart and PreToolUse "
            f"hooks), its bundle ({len(text) // 1024} KiB) verified offline"
        ),
        "events": len(bundle["events"]),
        "verify_s": {"best": min(timings), "median": statistics.median(timings)},
        "cli_verify_s": cli_s,
    }
