"""The HTTP reflector against a real loopback server, on both stores: every strategy,
the request contract and signature, malformed answers, timeouts (SPEC §8.2)."""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Iterator
from typing import Any

import pytest

from infra.settings import Settings
from tests.autonomy.conftest import Driven, drive, enable, post_signal, quiet_client
from tests.hook_server import HookServer
from tests.support import free_port
from tests.tasks.conftest import Clock

SECRET = "reflector-signing-secret"


@pytest.fixture
def server() -> Iterator[HookServer]:
    hook_server = HookServer()
    try:
        yield hook_server
    finally:
        hook_server.close()


def reflector_at(url: str, timeout_ms: int = 1000) -> str:
    return json.dumps(
        {"type": "http", "url": url, "timeoutMs": timeout_ms, "secretEnv": "REFLECT_SECRET"}
    )


@pytest.fixture
def http(settings: Settings, server: HookServer) -> Iterator[Driven]:
    with quiet_client(
        settings,
        reflector=reflector_at(server.url + "/reflect"),
        hook_allow_insecure_loopback=True,
        secrets={"REFLECT_SECRET": SECRET},
    ) as client:
        yield drive(client, Clock())


def answers(server: HookServer, *bodies: Any, status: int = 200) -> None:
    queue = list(bodies)
    server.routes["/reflect"] = lambda _: (status, queue.pop(0) if len(queue) > 1 else queue[0])


def run(driven: Driven) -> dict[str, int]:
    outcomes = driven.autonomy.reflect()
    driven.settled()
    return outcomes


def signal_row(driven: Driven, signal_id: str) -> dict[str, Any]:
    return dict(driven.client.get(f"/api/autonomy/signals/{signal_id}").json())


def test_every_strategy_is_applied_from_the_http_answer(http: Driven, server: HookServer) -> None:
    api = http.client
    enable(api, evolution=True, skillCreation=True, factRetention=True)
    answers(
        server,
        {"schemaVersion": 1, "strategy": "overlay", "content": "Run the linter first."},
        {"schemaVersion": 1, "strategy": "skill", "key": "lint", "content": "ruff check ."},
        {"schemaVersion": 1, "strategy": "fact", "key": "linter", "content": "ruff"},
        {"schemaVersion": 1, "strategy": "none"},
    )
    created = [
        post_signal(api, traceId=f"t{n}", failure="lint failed", failureClass="validation")
        for n in range(4)
    ]
    assert run(http) == {"completed": 4}
    strategies = [signal_row(http, s["id"])["strategy"] for s in created]
    assert strategies == ["overlay", "skill", "fact", "none"]
    targets = {
        (t["kind"], t["key"]): t["content"]
        for t in api.get("/api/autonomy/targets?agentId=claude").json()["items"]
    }
    assert targets == {
        ("overlay", "instructions"): "Run the linter first.",
        ("skill", "lint"): "ruff check .",
        ("fact", "linter"): "ruff",
    }
    # The request contract: the signal's evidence and the agent's current targets.
    path, body, headers = server.requests[-1]
    assert path == "/reflect" and set(body) == {"schemaVersion", "signal", "targets"}
    assert body["schemaVersion"] == 1
    assert body["signal"] == {
        "id": created[3]["id"],
        "agentId": "claude",
        "traceId": "t3",
        "kind": "failure",
        "goal": "fix the build",
        "outcome": None,
        "failure": "lint failed",
        "failureClass": "validation",
    }
    assert sorted((t["kind"], t["key"]) for t in body["targets"]) == sorted(targets)
    raw = json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()
    expected = hmac.new(
        SECRET.encode(), headers["x-tachograph-timestamp"].encode() + b"." + raw, hashlib.sha256
    ).hexdigest()
    assert headers["x-tachograph-signature"] == f"sha256={expected}"
    assert not {h.lower() for h in headers} & {"x-tachograph-key", "authorization", "cookie"}


MALFORMED = [
    (500, {"schemaVersion": 1, "strategy": "none"}, "HTTP status 500"),
    (200, {"schemaVersion": 1, "strategy": "none", "why": "x"}, "unknown keys"),
    (200, {"schemaVersion": 2, "strategy": "none"}, "schemaVersion"),
    (200, {"schemaVersion": 1, "strategy": "delete-all"}, "strategy must be one of"),
    (200, {"schemaVersion": 1, "strategy": "skill", "key": "UP", "content": "c"}, "key"),
    (
        200,
        {"schemaVersion": 1, "strategy": "skill", "key": "k", "content": "x" * 5000},
        "4 KiB",
    ),
    (200, "not an object", "not a JSON object"),
    (200, {"schemaVersion": 1, "strategy": "overlay", "content": "y" * 70000}, "over_cap"),
]


def test_malformed_answers_are_failed_attempts_without_mutation(
    http: Driven, server: HookServer
) -> None:
    enable(http.client, evolution=True, skillCreation=True)
    for n, (status, answer, error) in enumerate(MALFORMED):
        answers(server, answer, status=status)
        signal = post_signal(http.client, traceId=f"t{n}", failure="boom")
        assert run(http) == {"pending": 1}
        failed = signal_row(http, signal["id"])
        assert (failed["attempts"], failed["nextAttemptAt"] is not None) == (1, True)
        assert error in failed["lastError"], (answer, failed["lastError"])
    assert http.client.get("/api/autonomy/targets").json()["items"] == []


def test_a_slow_reflector_times_out_and_the_signal_backs_off(
    settings: Settings, server: HookServer
) -> None:
    answers(server, {"schemaVersion": 1, "strategy": "none"})
    server.delays["/reflect"] = 1.5
    with quiet_client(
        settings,
        reflector=reflector_at(server.url + "/reflect", timeout_ms=200),
        hook_allow_insecure_loopback=True,
        secrets={"REFLECT_SECRET": SECRET},
    ) as client:
        driven = drive(client, Clock())
        enable(client, evolution=True)
        signal = post_signal(client, failure="boom")
        assert run(driven) == {"pending": 1}
        failed = signal_row(driven, signal["id"])
        assert "timeout" in failed["lastError"] and failed["attempts"] == 1


def test_an_unreachable_reflector_is_a_failed_attempt(settings: Settings) -> None:
    with quiet_client(
        settings,
        reflector=reflector_at(f"http://127.0.0.1:{free_port()}/reflect"),
        hook_allow_insecure_loopback=True,
        secrets={"REFLECT_SECRET": SECRET},
    ) as client:
        driven = drive(client, Clock())
        enable(client, evolution=True)
        signal = post_signal(client, failure="boom")
        assert run(driven) == {"pending": 1}
        assert "transport" in signal_row(driven, signal["id"])["lastError"]
