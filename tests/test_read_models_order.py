"""Read models that do not depend on the order a tool call's events reach the log.

One call held for an approval has four kinds of fact: its PreToolUse (recorded when the
approval settles, or is abandoned), its PostToolUse (the runtime ran it), the operator's
decision, and the abandonment of a request whose caller went away. A runtime whose hook
stops waiting runs the call anyway, so every interleaving the hook path allows happens.
For each, through the service the hook routes call (both stores), the live read models,
projected step by step, must equal a rebuild from the log (`replay` finds no drift), and
the call's status must follow from its facts: a held call whose PostToolUse came before
its decision, or after a deny or an abandonment, ran while awaiting approval; a late
deny never relabels it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import itertools
import re
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from functools import partial
from typing import Any

import pytest

from bootstrap import Services, build_services
from domain.approval_rules import ApprovalRule, ApprovalRules
from domain.lifecycle import LifecycleEvent
from infra.settings import Settings
from ingest.approval_gate import ApprovalGate, PendingApproval
from ingest.loop import run_sync
from ingest.service import Hold, Ingested
from projections.activity import ActivityQuery, search_activity
from projections.replay import replay, select_projections
from projections.timeline import session_timeline

RULE = ApprovalRule("risky", "Bash", re.compile("^rm "), None, 60, "deny")
ORDER_SENSITIVE = ["timeline", "activity", "hook_audit", "sessions", "approvals"]


@pytest.fixture
def services(settings: Settings) -> Iterator[Services]:
    built = build_services(settings.with_(approvals=ApprovalRules((RULE,))))
    try:
        yield built
    finally:
        built.stop()


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    """The event loop a held call waits on, as the server's would, in a thread of its own."""
    running = asyncio.new_event_loop()
    thread = threading.Thread(target=running.run_forever, daemon=True)
    thread.start()
    try:
        yield running
    finally:
        asyncio.run_coroutine_threadsafe(_cancel_tasks(), running).result(5)
        running.call_soon_threadsafe(running.stop)
        thread.join(5)
        running.close()


async def _cancel_tasks() -> None:
    """What is left waiting on the loop (the approvals poller) ends with the test."""
    tasks = asyncio.all_tasks() - {asyncio.current_task()}
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


class Call:
    """One Claude Code tool call driven step by step through the hook path.

    A held PreToolUse waits on the event loop as a hook request does; the step that
    records it once its approval settled (or its caller left) is held back until the
    test says `settle` (or `abandon`), so every order of the facts can be produced.
    """

    def __init__(self, services: Services, loop: asyncio.AbstractEventLoop, command: str) -> None:
        self.services = services
        self.loop = loop
        self.session = uuid.uuid4()
        self.call_id = f"toolu_{uuid.uuid4().hex[:12]}"
        self.command = command
        self.pending: PendingApproval | None = None
        self.held: concurrent.futures.Future[Ingested] | None = None
        self.gone = threading.Event()
        self.release = threading.Event()
        ingest = services.ingest
        gate, offload = ingest.approvals.gate, ingest.offload
        recording_steps = (ApprovalGate.settled, ApprovalGate.abandoned)

        def watched_gate(*args: Any, **kwargs: Any) -> Any:
            gated = gate(*args, **kwargs)
            if isinstance(gated, PendingApproval):
                self.pending = gated
            return gated

        def held_back(step: Any) -> Any:
            if getattr(getattr(step, "func", None), "__func__", None) in recording_steps:
                return offload(partial(self._when_released, step))
            return offload(step)

        ingest.approvals.gate = watched_gate  # type: ignore[method-assign]
        ingest.offload = held_back
        run_sync(
            services.ingest.ingest(
                self.session,
                LifecycleEvent("UserPromptSubmit", agent="claude-code", prompt="clean up"),
                actor="agent",
                create_in="default",
            )
        )

    def _when_released(self, step: Callable[[], Any]) -> Any:
        assert self.release.wait(10), "the test never settled the held call"
        return step()

    async def _caller_left(self) -> None:
        while not self.gone.is_set():
            await asyncio.sleep(0.005)

    def _event(self, name: str, **extra: Any) -> LifecycleEvent:
        return LifecycleEvent(
            name,
            agent="claude-code",
            tool_name="Bash",
            tool_call_id=self.call_id,
            tool_input={"command": self.command},
            **extra,
        )

    def pre(self) -> None:
        """PreToolUse: held (an approval requested, nothing else recorded) or answered."""
        asked = self.services.ingest.ingest(
            self.session,
            self._event("PreToolUse"),
            actor="agent",
            hold=Hold(gone=self._caller_left),
        )
        held = asyncio.run_coroutine_threadsafe(asked, self.loop)
        deadline = time.monotonic() + 10
        while not held.done() and (self.pending is None or not self._waiting()):
            assert time.monotonic() < deadline, "the call was neither held nor answered"
            time.sleep(0.005)
        if held.done():
            held.result()  # answered at once (raises what the service raised)
        else:
            self.held = held

    def _waiting(self) -> bool:
        held = self.services.held
        return held is not None and held.waiting > 0

    def post(self) -> None:
        run_sync(
            self.services.ingest.ingest(
                self.session,
                self._event("PostToolUse", tool_response={"stdout": "removed"}, duration_ms=26),
                actor="agent",
            )
        )

    def decide(self, verdict: str) -> Callable[[], None]:
        def step() -> None:
            assert self.pending is not None
            self.services.app.decide_approval(
                self.pending.approval_id, verdict, "key:admin", None, False, datetime.now(UTC)
            )

        return step

    def settle(self) -> None:
        """The held request wakes and records the Pre with the decision."""
        assert self.held is not None
        self.release.set()
        self.held.result(10)

    def abandon(self) -> None:
        """The held request's caller went away: abandoned, the Pre recorded as `ask`."""
        assert self.held is not None
        self.gone.set()
        self.release.set()
        self.held.result(10)


def interleavings(held: list[str]) -> Iterator[list[str]]:
    """Every position of the PostToolUse among the held call's own steps."""
    for at in range(len(held) + 1):
        yield [*held[:at], "post", *held[at:]]


# The held call's own steps, in the one order they can happen; the Post goes anywhere.
HELD_PATHS = {
    "allowed": ["pre", "allow", "settle"],
    "denied": ["pre", "deny", "settle"],
    "abandoned": ["pre", "abandon"],
}
CASES = [
    (path, steps)
    for path, held in HELD_PATHS.items()
    for steps in interleavings(held)
    if steps[0] == "pre"  # a Post before its Pre was even asked: covered unheld below
] + [("unheld", list(order)) for order in itertools.permutations(["pre", "post"])]


def expected_status(path: str, steps: list[str]) -> str:
    if path == "unheld":
        return "ok"
    if path == "allowed" and steps.index("post") > steps.index("settle"):
        return "ok"  # the allow reached the agent before it ran the call
    return "ran_undecided"


def call_row(services: Services, call: Call) -> tuple[dict[str, Any], dict[str, Any]]:
    turns, _ = session_timeline(services.store, str(call.session), 10, None)
    calls = [c for t in turns for c in t["calls"] if c["toolCallId"] == call.call_id]
    found, _ = search_activity(services.store, ActivityQuery(session_id=str(call.session)))
    rows = [r for r in found if r["toolCallId"] == call.call_id]
    assert len(calls) == 1 and len(rows) == 1, (turns, found)
    return calls[0], rows[0]


@pytest.mark.parametrize(
    ("path", "steps"), CASES, ids=lambda v: "-".join(v) if isinstance(v, list) else v
)
def test_a_calls_rows_follow_from_its_facts_in_any_order(
    services: Services, loop: asyncio.AbstractEventLoop, path: str, steps: list[str]
) -> None:
    command = "rm -rf build" if path != "unheld" else "ls build"
    call = Call(services, loop, command)
    actions: dict[str, Callable[[], None]] = {
        "pre": call.pre,
        "post": call.post,
        "allow": call.decide("allow"),
        "deny": call.decide("deny"),
        "settle": call.settle,
        "abandon": call.abandon,
    }
    for step in steps:
        actions[step]()
        services.runner.catch_up()  # the live runner sees each step in its own batch

    timeline, activity = call_row(services, call)
    status = expected_status(path, steps)
    assert timeline["status"] == status
    assert activity["status"] == status
    assert timeline["bytes"] is not None and activity["bytes"] is not None
    assert timeline["decision"] == activity["decision"]

    reports = replay(
        services.app, services.store, select_projections(services.projections, ORDER_SENSITIVE)
    )
    drifted = {r.name: r.as_dict() for r in reports if r.drift}
    assert drifted == {}
