"""Signals from real turns on both stores: Claude Code's captured payloads, a Coder chat
and a failing task attempt become one signal per finished turn while evolution is on;
redelivery adds none; manual signals keep working; a signal of the previous release
still loads and projects."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from uuid import UUID

from eventsourcing.persistence import StoredEvent
from fastapi.testclient import TestClient

from domain.learned_target import learned_target_id
from domain.lifecycle import agent_session_uuid
from domain.signal import Signal, signal_id
from infra.settings import Settings
from projections.replay import replay, select_projections
from tests.autonomy.conftest import Driven, drive, enable, post_signal, quiet_client, services_of
from tests.hook_server import HookServer, answer
from tests.tasks.conftest import Clock
from tests.test_agent_adapters_api import AUDIENCE, SECRET, claude_session, coder_request
from tests.test_hook_gateway_api import hooks_settings

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
CAPTURED = FIXTURES / "claude-code-2.1.328"


def scenario(name: str) -> list[dict[str, Any]]:
    return [json.loads(p.read_text()) for p in sorted((CAPTURED / name).glob("[0-9]*.json"))]


def older(name: str) -> dict[str, Any]:
    """A payload of an earlier Claude Code (no prompt_id), from tests/fixtures/claude-code."""
    document: dict[str, Any] = json.loads((FIXTURES / "claude-code" / name).read_text())
    payload: dict[str, Any] = document.get("payload", document)
    return payload


def post_claude(client: TestClient, payloads: list[dict[str, Any]]) -> list[int]:
    """Post hook payloads as Claude Code does; the log position of each."""
    positions = []
    for payload in payloads:
        response = client.post("/hooks/claude", json=payload)
        assert response.status_code == 200, response.text
        positions.append(int(response.headers["x-tachograph-position"]))
    return positions


def derived(driven: Driven, **params: Any) -> list[dict[str, Any]]:
    """Run the signal worker's derivation, then list the signals (newest first)."""
    driven.settled()
    driven.autonomy.derive()
    driven.settled()
    response = driven.client.get("/api/autonomy/signals", params=params)
    assert response.status_code == 200, response.text
    items: list[dict[str, Any]] = response.json()["items"]
    return items


def candidates(driven: Driven) -> list[dict[str, Any]]:
    return driven.services.store.query("SELECT * FROM rm_turn_signals ORDER BY position")


def no_drift(driven: Driven) -> None:
    services = driven.services
    chosen = select_projections(services.projections, ["signals", "turn_signals"])
    reports = replay(services.app, services.store, chosen, swap=True)
    assert [r.name for r in reports if r.drift] == []


def test_a_claude_code_turn_gives_one_outcome_signal_and_redelivery_none(
    driven: Driven,
) -> None:
    enable(driven.client, evolution=True)
    payloads = scenario("basic")
    post_claude(driven.client, payloads)
    (signal,) = derived(driven)
    session_id = claude_session(payloads[0])
    turn_id = payloads[1]["prompt_id"]
    assert (signal["agentId"], signal["kind"], signal["status"]) == (
        "claude-code",
        "outcome",
        "pending",
    )
    assert signal["traceId"] == f"{session_id}:{turn_id}"
    assert (signal["sessionId"], signal["turnId"]) == (session_id, turn_id)
    assert signal["goal"] == "Run a shell command, then write hello.txt."
    assert signal["outcome"] == "All done: ran a shell command and wrote hello.txt."
    assert (signal["failure"], signal["failureClass"], signal["received"]) == (None, None, [])
    expected = signal_id("claude-code", f"{session_id}:{turn_id}", "outcome")
    assert signal["id"] == str(expected)
    # Claude Code redelivers: every hook again, the Stop a third time.
    post_claude(driven.client, [*payloads, payloads[9]])
    assert [s["id"] for s in derived(driven)] == [signal["id"]]
    assert len(candidates(driven)) == 1
    no_drift(driven)


def test_a_turn_without_a_turn_id_is_traced_by_its_prompt_position(driven: Driven) -> None:
    enable(driven.client, evolution=True)
    names = ["SessionStart-2", "UserPromptSubmit-1", "PreToolUse-1", "PostToolUse-1", "Stop-1"]
    payloads = [older(f"{name}.json") for name in names]
    positions = post_claude(driven.client, payloads)
    (signal,) = derived(driven)
    session_id = claude_session(payloads[0])
    assert signal["traceId"] == f"{session_id}:{positions[1]}"
    assert (signal["kind"], signal["turnId"]) == ("outcome", None)
    assert signal["goal"].startswith("S0 spike: use the Write tool")
    assert signal["outcome"] == payloads[4]["last_assistant_message"]


def test_a_stop_failure_gives_only_a_failure_with_the_runtime_error_class(
    driven: Driven,
) -> None:
    enable(driven.client, evolution=True)
    for name, error in (("sf529", "server_error"), ("sf401", "authentication_failed")):
        payloads = scenario(name)
        post_claude(driven.client, payloads)
        session_id = claude_session(payloads[0])
        signal = derived(driven)[0]
        assert signal["sessionId"] == session_id
        assert (signal["kind"], signal["failureClass"]) == ("failure", error)
        assert signal["failure"] == f"The runtime ended the turn with an error: {error}."
        assert signal["goal"] == payloads[1]["prompt"]
        assert signal["turnId"] == payloads[1]["prompt_id"]
    assert len(derived(driven)) == 2
    # SessionEnd came before this StopFailure, as real payloads sometimes arrive.
    payloads = scenario("sf529")
    late = {**payloads[1], "session_id": "late-session", "prompt_id": "late-turn"}
    stop_failure = {**payloads[3], "session_id": "late-session", "prompt_id": "late-turn"}
    session_end = {**payloads[4], "session_id": "late-session"}
    post_claude(driven.client, [late, session_end, stop_failure])
    (latest, *_) = derived(driven)
    assert latest["traceId"] == f"{claude_session(late)}:late-turn"
    assert latest["failureClass"] == "server_error"


def test_the_same_tool_failing_twice_in_a_turn_is_a_failure_once(driven: Driven) -> None:
    enable(driven.client, evolution=True)
    payloads = scenario("fail_tool")
    failure = payloads[3]
    # The same failure redelivered (same tool_use_id) is one failure: the turn succeeded.
    post_claude(driven.client, [*payloads[:4], failure, *payloads[4:]])
    (once,) = derived(driven)
    assert once["kind"] == "outcome" and once["outcome"] == "The command failed, done."
    # A second call of the same tool failing in the turn is a failure pattern.
    again = [{**p, "session_id": "twice", "prompt_id": "turn-twice"} for p in payloads]
    second = {**again[3], "tool_use_id": "toolu_second"}
    post_claude(driven.client, [*again[:4], {**again[2], "tool_use_id": "toolu_second"}])
    post_claude(driven.client, [second, *again[4:]])
    signals = derived(driven)
    assert len(signals) == 2
    twice = signals[0]
    assert (twice["kind"], twice["failureClass"]) == ("failure", "tool_failure")
    # The error as the runtime gave it: the exit code, then what the command printed.
    assert twice["failure"] == "Bash failed 2 times in one turn: Exit code 3\nabout-to-fail"
    assert twice["traceId"] == f"{claude_session(again[0])}:turn-twice"
    assert [s["kind"] for s in signals if s["traceId"] == twice["traceId"]] == ["failure"]
    no_drift(driven)


@contextmanager
def denying(settings: Settings, clock: Clock) -> Iterator[Driven]:
    server = HookServer()
    server.routes["/pre"] = answer("deny", reason="no markers outside the sandbox")
    hooks = {"PreToolUse": [{"id": "guard", "type": "http", "url": "$URL/pre"}]}
    try:
        with quiet_client(hooks_settings(settings, server, hooks)) as client:
            yield drive(client, clock)
    finally:
        server.close()


def test_a_turn_that_ends_after_a_policy_deny_is_a_failure(
    settings: Settings, clock: Clock
) -> None:
    with denying(settings, clock) as driven:
        enable(driven.client, evolution=True)
        payloads = scenario("deny_json")
        post_claude(driven.client, payloads)
        (signal,) = derived(driven)
    assert (signal["kind"], signal["failureClass"]) == ("failure", "policy_denied")
    assert signal["failure"] == (
        "Write was denied by policy, then the turn ended: no markers outside the sandbox\n"
        "The call: <WORK>/proj/hello.txt"
    )
    assert signal["goal"] == payloads[1]["prompt"]


def test_no_signal_is_made_while_evolution_is_off(driven: Driven) -> None:
    payloads = scenario("basic")
    post_claude(driven.client, payloads)
    assert derived(driven) == [] and candidates(driven) == []
    # Turned on mid-turn: the turn began while off, so it still gives nothing.
    second = [{**p, "prompt_id": "second-turn"} for p in payloads[1:]]
    post_claude(driven.client, second[:3])
    enable(driven.client, evolution=True)
    post_claude(driven.client, second[3:])
    assert derived(driven) == []
    third = [{**p, "prompt_id": "third-turn"} for p in payloads[1:]]
    post_claude(driven.client, third)
    (signal,) = derived(driven)
    assert signal["turnId"] == "third-turn"
    # Turned off before its Stop: the open turn is forgotten.
    fourth = [{**p, "prompt_id": "fourth-turn"} for p in payloads[1:]]
    post_claude(driven.client, fourth[:3])
    enable(driven.client, evolution=False)
    enable(driven.client, evolution=True)
    post_claude(driven.client, fourth[3:])
    assert [s["turnId"] for s in derived(driven)] == ["third-turn"]
    no_drift(driven)


def test_a_coder_chat_turn_gives_its_failure(settings: Settings, clock: Clock) -> None:
    changes = {"coder_hook_secret": SECRET, "coder_hook_url": AUDIENCE}
    with quiet_client(settings, **changes) as client:
        driven = drive(client, clock)
        enable(client, evolution=True)
        stream: list[tuple[str, dict[str, Any]]] = [
            ("session_start", {"source": "startup"}),
            ("user_prompt_submit", {"prompt": "make the linter pass"}),
            ("pre_tool_use", {"tool_use_id": "a", "tool_name": "bash", "tool_input": {"cmd": "x"}}),
            ("post_tool_use", {"tool_use_id": "a", "tool_name": "bash", "tool_error": "exit 2"}),
            ("pre_tool_use", {"tool_use_id": "b", "tool_name": "bash", "tool_input": {"cmd": "y"}}),
            ("post_tool_use", {"tool_use_id": "b", "tool_name": "bash", "tool_error": "exit 2"}),
            ("stop", {}),
        ]
        for n, (type_, data) in enumerate(stream):
            body, headers = coder_request(type_, data=data, dispatch_id=f"disp-{n}")
            response = client.post("/hooks/coder", content=body, headers=headers)
            assert response.status_code == 200, response.text
        # Coder redelivers the stop with its dispatch id: the stored answer, no new turn end.
        body, headers = coder_request("stop", data={}, dispatch_id=f"disp-{len(stream) - 1}")
        assert client.post("/hooks/coder", content=body, headers=headers).status_code == 200
        (signal,) = derived(driven)
    session_id = str(agent_session_uuid("coder:chat-1"))
    assert (signal["agentId"], signal["traceId"]) == ("coder", f"{session_id}:turn-9")
    assert (signal["kind"], signal["failureClass"]) == ("failure", "tool_failure")
    assert signal["failure"] == "bash failed 2 times in one turn: exit 2"
    assert (signal["goal"], signal["turnId"]) == ("make the linter pass", "turn-9")


def test_a_failed_task_attempt_gives_a_failure_of_agent_tasks(driven: Driven) -> None:
    enable(driven.client, evolution=True)
    created = driven.client.post(
        "/api/tasks", json={"workspaceId": "default", "prompt": "rebuild the docs index"}
    )
    assert created.status_code == 201, created.text
    task_id = UUID(created.json()["id"])
    service = driven.tasks.service
    claim = service.claim(task_id, "worker-1")
    assert claim is not None
    service.fail(task_id, claim.attempt, "validation", "exit code 2: unknown flag --fast")
    signals = derived(driven, agentId="tasks")
    (signal,) = signals
    assert signal["traceId"] == f"task:{task_id}:1"
    assert (signal["kind"], signal["failureClass"]) == ("failure", "validation")
    assert signal["failure"] == "exit code 2: unknown flag --fast"
    assert signal["goal"] == "rebuild the docs index"
    assert (signal["sessionId"], signal["turnId"]) == (str(claim.session_id), claim.turn_id)
    # The failure observed again changes nothing; a completed task gives no signal.
    service.fail(task_id, claim.attempt, "validation", "exit code 2: unknown flag --fast")
    assert len(derived(driven, agentId="tasks")) == 1
    no_drift(driven)


def test_a_turn_names_the_learned_targets_it_received(driven: Driven) -> None:
    enable(driven.client, evolution=True)
    edit = driven.client.put(
        "/api/autonomy/targets/overlay/claude-code/lesson.tests",
        json={"content": "Run the tests before you say it works."},
    )
    assert edit.status_code in (200, 201), edit.text
    payloads = scenario("basic")
    post_claude(driven.client, payloads)
    (signal,) = derived(driven)
    assert signal["received"] == [str(learned_target_id("overlay", "claude-code", "lesson.tests"))]


def test_manual_signals_keep_working_and_may_name_their_turn(driven: Driven) -> None:
    enable(driven.client, evolution=True)
    plain = post_signal(driven.client, failure="make: *** error 2")
    assert (plain["turnId"], plain["received"]) == (None, [])
    named = post_signal(driven.client, traceId="t2", turnId="turn-7", failure="boom")
    assert (named["turnId"], named["received"]) == ("turn-7", [])
    refused = driven.client.post(
        "/api/autonomy/signals",
        json={"agentId": "a", "traceId": "t3", "kind": "failure", "goal": "g", "turnId": ""},
    )
    assert refused.status_code == 422 and "turnId" in refused.text
    assert len(derived(driven)) == 2


def test_a_signal_stored_by_the_previous_release_loads_and_projects(driven: Driven) -> None:
    services = services_of(driven.client)
    signal = Signal(
        agent_id="claude-code",
        trace_id="s:1",
        kind="failure",
        goal="make the build green",
        outcome=None,
        failure="pytest failed",
        failure_class="test_failure",
        session_id=None,
        actor="agent",
    )
    mapper = services.app.mapper
    stored = mapper.to_stored_event(signal.collect_events()[0])
    state = mapper.transcoder.decode(stored.state)
    assert state.pop("class_version") == 3
    # Version 1 had no turn, received targets, workspace or credential.
    del state["turn_id"], state["received"], state["workspace_id"], state["credential"]
    services.app.recorder.insert_events(
        [
            StoredEvent(
                originator_id=stored.originator_id,
                originator_version=stored.originator_version,
                topic=stored.topic,
                state=mapper.transcoder.encode(state),
            )
        ]
    )
    driven.settled()
    reloaded: Signal = services.app.repository.get(signal.id)
    assert (reloaded.turn_id, reloaded.received, reloaded.goal) == (
        None,
        [],
        "make the build green",
    )
    assert (reloaded.workspace_id, reloaded.credential) == (None, None)
    shown = driven.client.get(f"/api/autonomy/signals/{signal.id}").json()
    assert (shown["turnId"], shown["received"], shown["failure"]) == (None, [], "pytest failed")
    assert (shown["workspaceId"], shown["credential"]) == (None, None)
    claim = driven.autonomy.signals.claim(signal.id, "worker")
    assert claim is not None and (claim.evidence.turn_id, claim.evidence.received) == (None, ())
    no_drift(driven)


def test_a_deleted_session_gives_no_signal_for_its_turns(driven: Driven) -> None:
    enable(driven.client, evolution=True)
    payloads = scenario("basic")
    post_claude(driven.client, payloads)
    deleted = driven.client.delete(f"/api/sessions/{claude_session(payloads[0])}")
    assert deleted.status_code == 204, deleted.text
    post_claude(driven.client, payloads[9:10])  # a straggling Stop after the deletion
    assert derived(driven) == [] and candidates(driven) == []
    no_drift(driven)


def test_with_metadata_recording_the_hints_are_the_evidence(
    settings: Settings, clock: Clock
) -> None:
    with quiet_client(settings, record="metadata") as client:
        driven = drive(client, clock)
        enable(client, evolution=True)
        basic, failed = scenario("basic"), scenario("sf529")
        post_claude(client, [*basic, *failed])
        stop_failure, outcome = derived(driven)
    assert (outcome["kind"], outcome["goal"]) == ("outcome", basic[1]["prompt"])
    assert outcome["outcome"] == basic[9]["last_assistant_message"]
    assert (stop_failure["kind"], stop_failure["failureClass"]) == ("failure", "stop_failure")
    assert stop_failure["failure"] == "The runtime ended the turn with an error: unknown."
