"""Auditor search (`GET /api/activity`) over N synthetic recorded tool calls.

The calls go through the activity projection itself (its batched writes, text index
included), in transactions of 5,000 as a rebuild would write them; the load time is
part of the result. Then each query of QUERIES is asked through the FastAPI app,
in turns, QUERY_ROUNDS times, and its latency's p50 and p99 reported.
"""

from __future__ import annotations

import random
import statistics
import time
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from projections.activity import ActivityProjection
from projections.base import Envelope
from projections.store import ReadStore

BATCH = 5000
SESSIONS = 2000
QUERY_ROUNDS = 40
RARE = "git push --force origin main"  # one call in a thousand
_COMMANDS = (
    "git status",
    "git diff --stat",
    "npm test -- --watch=false",
    "pytest -q tests/unit",
    "ls -la src/components",
    "cat README.md",
    "git push origin feature-{n}",
    "rm -rf build/{n}",
    "curl -s https://example.test/api/{n}",
    "make -j2 target-{n}",
)


def _summary(rng: random.Random, n: int) -> tuple[str, str]:
    if n % 1000 == 7:
        return "Bash", RARE
    if n % 5 == 0:
        return rng.choice(("Write", "Edit", "Read")), f"/repo/src/module_{n % 9973}.py"
    return "Bash", rng.choice(_COMMANDS).format(n=n % 50_021)


def _envelopes(rows: int) -> list[Envelope]:
    rng = random.Random(7)
    start = datetime(2026, 11, 1, tzinfo=UTC)
    sessions = [str(uuid.UUID(int=rng.getrandbits(128))) for _ in range(SESSIONS)]
    made = [
        Envelope(
            position=i + 1,
            aggregate_id=uuid.UUID(session),
            version=1,
            type="Session.Created",
            data={"timestamp": start, "workspace": f"ws-{i % 20}"},
        )
        for i, session in enumerate(sessions)
    ]
    for n in range(rows):
        tool, summary = _summary(rng, n)
        denied = n % 100 == 3
        made.append(
            Envelope(
                position=SESSIONS + n + 1,
                aggregate_id=uuid.UUID(int=n + 1),
                version=1,
                type="HookDispatch.Created",
                data={
                    "timestamp": start + timedelta(seconds=n),
                    "event_name": "PreToolUse",
                    "session_id": sessions[n % SESSIONS],
                    "turn_id": f"turn-{n // 20}",
                    "tool_call_id": f"call-{n}",
                    "tool_name": tool,
                    "outcome": "deny" if denied else "pass",
                    "runs": [],
                    "agent": "claude-code",
                    "subagent_id": None,
                    "facts": {"input_summary": summary},
                },
            )
        )
    return made


def load(store: ReadStore, rows: int) -> float:
    """Write the synthetic calls through the projection; return the seconds it took."""
    projection = ActivityProjection()
    envelopes = _envelopes(rows)
    started = time.perf_counter()
    with store.bulk_load():
        for first in range(0, len(envelopes), BATCH):
            with store.transaction() as cur:
                projection.begin_batch(cur)
                for envelope in envelopes[first : first + BATCH]:
                    projection.apply(cur, envelope)
                projection.end_batch(cur)
    return time.perf_counter() - started


def queries(rows: int) -> dict[str, dict[str, Any]]:
    session = str(uuid.UUID(int=random.Random(7).getrandbits(128)))
    return {
        "rare_text": {"contains": "push --force"},
        "common_text": {"contains": "git"},
        "no_match": {"contains": "terraform apply"},
        "tool": {"tool": "Write"},
        "denied": {"outcome": "deny"},
        "session": {"sessionId": session},
        "workspace_and_text": {"workspaceId": "ws-3", "contains": "pytest"},
        "rare_text_last_week": {
            "contains": "push --force",
            "since": (datetime(2026, 11, 1, tzinfo=UTC) + timedelta(seconds=rows - 7 * 86400))
            .isoformat()
            .replace("+00:00", "Z"),
        },
    }


def measure(client: Any, asked: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Each query QUERY_ROUNDS times, the queries in turns; p50/p99 in milliseconds."""
    samples: dict[str, list[float]] = {name: [] for name in asked}
    found: dict[str, int] = {}
    for params in asked.values():  # warm-up: caches and plans, not measured
        client.get("/api/activity", params={**params, "limit": 50})
    for _ in range(QUERY_ROUNDS):
        for name, params in asked.items():
            started = time.perf_counter()
            response = client.get("/api/activity", params={**params, "limit": 50})
            samples[name].append((time.perf_counter() - started) * 1000)
            assert response.status_code == 200, response.text
            found[name] = len(response.json()["items"])
    result = {}
    for name, values in samples.items():
        ordered = sorted(values)
        result[name] = {
            "p50_ms": statistics.median(ordered),
            "p99_ms": ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))],
            "items": found[name],
        }
    return result
