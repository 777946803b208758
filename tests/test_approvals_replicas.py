"""Approvals across two `serve` replicas on one PostgreSQL schema.

A Claude Code PreToolUse held open by replica A is decided through replica B: A is woken by
B's NOTIFY (or finds the settlement polling the log) and answers its waiting hook. Timing
is printed, not asserted (this runs on a small, noisy machine): the time from B's decide
response to A's answer, and from the moment the decide was sent. Also: a decision on the
replica holding the request, and a decide at B after A let the request expire (409 naming
`expired`).
"""

from __future__ import annotations

import json
import statistics
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from infra.settings import Settings
from tests.support import Server
from tests.test_approvals_api import pre_tool_use

pytestmark = [pytest.mark.slow, pytest.mark.parametrize("store_kind", ["postgres"], indirect=True)]

ADMIN_KEY = "approvals-replicas-admin-key"
ADMIN = {"x-tachograph-key": ADMIN_KEY}
RULES = {
    "version": 1,
    "rules": [
        {"id": "release", "tool": "Bash", "match": "^release ", "timeoutS": 60},
        {"id": "brief", "tool": "Bash", "match": "^brief ", "timeoutS": 1},
    ],
}
SEQUENTIAL = 20
CONCURRENT = 5
SAME_REPLICA = 5


@dataclass
class Replicas:
    a: httpx.Client
    b: httpx.Client
    agent: dict[str, str]


class Held:
    """One hook request to replica A on its own thread; when its answer arrived."""

    def __init__(self, send: Callable[[], httpx.Response]) -> None:
        self.response: httpx.Response | None = None
        self.error: BaseException | None = None
        self.answered_at: float | None = None
        self._send = send
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self.response = self._send()
        except BaseException as exc:  # noqa: BLE001 - shown by result(), not lost in a thread
            self.error = exc
        self.answered_at = time.monotonic()

    def result(self, timeout: float = 70) -> httpx.Response:
        self._thread.join(timeout)
        assert self.error is None, repr(self.error)
        assert self.response is not None, "the held hook was never answered"
        return self.response


@pytest.fixture
def replicas(
    request: pytest.FixtureRequest, settings: Settings, tmp_path: Path
) -> Iterator[Replicas]:
    env = {"TACHOGRAPH_APPROVALS": json.dumps(RULES), "TACHOGRAPH_DATABASE_POOL_SIZE": "3"}
    shared = settings.with_(api_key=ADMIN_KEY)
    # A's own settings (indirect parametrisation), e.g. a log poll too slow to answer in time.
    own: dict[str, str] = getattr(request, "param", {})
    servers = [
        Server(shared, tmp_path / f"serve-{n}.log", {**env, **(own if n == "a" else {})})
        for n in "ab"
    ]
    try:
        for server in servers:
            server.wait_ready(timeout=60, headers=ADMIN)
        a, b = (httpx.Client(base_url=s.url, headers=ADMIN, timeout=30) for s in servers)
        with a, b:
            issued = a.post("/api/keys", json={"role": "agent", "workspaceId": "default"})
            assert issued.status_code == 201, issued.text
            yield Replicas(a, b, {"x-tachograph-key": issued.json()["secret"]})
    finally:
        for server in servers:
            server.kill()


def hold(replicas: Replicas, native: str, command: str) -> Held:
    body = pre_tool_use(native, command)
    agent = replicas.agent
    return Held(lambda: replicas.a.post("/hooks/claude", json=body, headers=agent, timeout=90))


def wait_listed(
    client: httpx.Client, command: str, status: str | None = "pending", seconds: float = 20
) -> dict[str, Any]:
    """The approval of `command` as this replica lists it, once it does."""
    params = {"status": status} if status else {}
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        items = client.get("/api/approvals", params=params).json()["items"]
        found = [i for i in items if i["inputSummary"] == command]
        if found:
            return dict(found[0])
        time.sleep(0.02)
    raise AssertionError(f"no {status or ''} approval of {command!r} listed")


def decide_and_time(
    decider: httpx.Client, held: Held, approval_id: str, body: dict[str, Any]
) -> tuple[httpx.Response, httpx.Response, float, float]:
    """Decide; the decide's and the hook's answers, and how long after the decide's
    response (and after it was sent) the hook was answered. Negative: the hook was
    answered first (the decide's response waits for the decider's own read models)."""
    sent = time.monotonic()
    decided = decider.post(f"/api/approvals/{approval_id}/decide", json=body)
    responded = time.monotonic()
    assert decided.status_code == 200, decided.text
    answer = held.result()
    assert held.answered_at is not None
    since_response = (held.answered_at - responded) * 1000
    return decided, answer, since_response, (held.answered_at - sent) * 1000


def check_answer(answer: httpx.Response, verdict: str, reason: str) -> None:
    assert answer.status_code == 200, answer.text
    if verdict == "allow":
        assert answer.json() == {}
        return
    output = answer.json()["hookSpecificOutput"]
    assert output["permissionDecision"] == "deny"
    assert "Denied by key:admin" in output["permissionDecisionReason"]
    assert reason in output["permissionDecisionReason"]


def figures(name: str, samples: list[float]) -> str:
    ordered = sorted(samples)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    return (
        f"{name}: n={len(ordered)} median={statistics.median(ordered):.1f} ms "
        f"p95={p95:.1f} ms max={ordered[-1]:.1f} ms min={ordered[0]:.1f} ms"
    )


def test_a_decision_on_b_answers_the_hook_held_by_a(replicas: Replicas) -> None:
    native = str(uuid.uuid4())
    after_response: list[float] = []
    after_send: list[float] = []
    for n in range(SEQUENTIAL):
        command = f"release v{n}"
        verdict = "allow" if n % 2 == 0 else "deny"
        reason = f"replica-b call {n}"
        held = hold(replicas, native, command)
        request = wait_listed(replicas.b, command)
        assert held.response is None  # still held by A
        _, answer, since_response, since_send = decide_and_time(
            replicas.b, held, request["id"], {"decision": verdict, "reason": reason}
        )
        check_answer(answer, verdict, reason)
        after_response.append(since_response)
        after_send.append(since_send)
    # A few held at once: one poll serves every waiter.
    commands = [f"release batch {n}" for n in range(CONCURRENT)]
    batch = [(command, hold(replicas, native, command)) for command in commands]
    requests = [(command, held, wait_listed(replicas.b, command)) for command, held in batch]
    for command, held, request in requests:
        decided, answer, since_response, since_send = decide_and_time(
            replicas.b, held, request["id"], {"decision": "deny", "reason": command}
        )
        check_answer(answer, "deny", command)
        after_response.append(since_response)
        after_send.append(since_send)
    # A answered from the log; its read model lists them as of the last decision's position.
    position = decided.headers["x-tachograph-position"]
    params: dict[str, str | int] = {"status": "decided", "limit": 500, "minPosition": position}
    rows = replicas.a.get("/api/approvals", params=params).json()
    assert len(rows["items"]) == SEQUENTIAL + CONCURRENT
    assert {r["decidedBy"] for r in rows["items"]} == {"key:admin"}
    print()
    print(figures("B decide response -> A hook answer", after_response))
    print(figures("B decide sent -> A hook answer", after_send))


def test_a_decision_on_the_holding_replica_answers_at_once(replicas: Replicas) -> None:
    native = str(uuid.uuid4())
    after_response: list[float] = []
    position = "0"
    for n in range(SAME_REPLICA):
        command = f"release local {n}"
        held = hold(replicas, native, command)
        request = wait_listed(replicas.a, command)
        decided, answer, since_response, _ = decide_and_time(
            replicas.a, held, request["id"], {"decision": "allow"}
        )
        check_answer(answer, "allow", "")
        after_response.append(since_response)
        position = decided.headers["x-tachograph-position"]
    # The other replica reads the same decisions, as of the last one's position.
    seen = replicas.b.get("/api/approvals", params={"status": "decided", "minPosition": position})
    assert [r["decidedBy"] for r in seen.json()["items"]] == ["key:admin"] * SAME_REPLICA
    print()
    print(figures("A decide response -> A hook answer", after_response))


def test_a_decide_at_b_after_a_let_it_expire_is_a_conflict(replicas: Replicas) -> None:
    command = "brief deploy"
    started = time.monotonic()
    held = hold(replicas, str(uuid.uuid4()), command)
    request = wait_listed(replicas.b, command, status=None)
    answer = held.result()
    assert time.monotonic() - started >= 0.9  # held for the rule's second
    output = answer.json()["hookSpecificOutput"]
    assert output["permissionDecision"] == "deny"
    assert "No operator decided" in output["permissionDecisionReason"]
    late = replicas.b.post(f"/api/approvals/{request['id']}/decide", json={"decision": "allow"})
    assert late.status_code == 409, late.text
    assert "expired" in late.json()["message"]
    expired = wait_listed(replicas.b, command, status="expired")
    assert (expired["decision"], expired["decidedBy"]) == ("deny", "system")


@pytest.mark.parametrize("replicas", [{"TACHOGRAPH_APPROVAL_POLL_S": "60"}], indirect=True)
def test_the_holder_is_woken_by_the_deciders_notification_not_its_poll(
    replicas: Replicas,
) -> None:
    """With A's log poll at 60 s only B's NOTIFY can answer A's hooks within seconds."""
    native = str(uuid.uuid4())
    answered: list[float] = []
    for n in range(3):
        command = f"release notified {n}"
        held = hold(replicas, native, command)
        request = wait_listed(replicas.b, command)
        _, answer, _, since_send = decide_and_time(
            replicas.b, held, request["id"], {"decision": "allow"}
        )
        check_answer(answer, "allow", "")
        answered.append(since_send)
    assert max(answered) < 10_000, answered  # far below the 60 s poll: the NOTIFY woke A
    print()
    print(figures("B decide sent -> A hook answer (poll 60 s)", answered))
