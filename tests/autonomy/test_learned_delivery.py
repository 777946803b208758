"""Learned content delivered to agents (both stores): what Claude Code and Coder are told at
SessionStart and UserPromptSubmit, under the one context cap shared with managed
handlers; which revisions each delivery carried (GET .../deliveries, the session
timeline); reverts, user edits and hand-backs seen by the next delivery; deliveries
surviving a swapped replay; and a revert racing deliveries never leaving one half-told."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any
from uuid import uuid4

import httpx
import pytest
from eventsourcing.persistence import StoredEvent
from fastapi.testclient import TestClient

from bootstrap import build_services
from domain.hook_dispatch import CONTEXT_CAP
from domain.hook_dispatch_record import HookDispatch
from domain.learned_target import content_digest
from infra.settings import Settings
from projections.replay import replay
from services.log_audit import verify_log
from tests.autonomy.conftest import Driven, drive, enable, post_signal, quiet_client
from tests.hook_server import HookServer, answer
from tests.support import Server, env_for
from tests.tasks.conftest import Clock
from tests.test_agent_adapters_api import (
    AUDIENCE,
    SECRET,
    claude_session,
    coder_request,
    run_command_hook,
)
from tests.test_event_round_trip import hook_dispatch_created
from tests.test_hook_gateway_api import hooks_settings
from tests.test_replay import run_cli

CAPTURED = Path(__file__).resolve().parents[1] / "fixtures" / "claude-code-2.1.328" / "basic"


def captured(name: str, session: str | None = None) -> dict[str, Any]:
    payload: dict[str, Any] = json.loads((CAPTURED / name).read_text())
    if session is not None:
        payload["session_id"] = session
    return payload


def learn(driven: Driven, agent: str, trace: str, failure: str) -> dict[str, Any]:
    """One learned revision for `agent` through the real worker (rules reflector)."""
    post_signal(
        driven.client, agentId=agent, traceId=trace, failure=failure, failureClass="tool_error"
    )
    assert driven.autonomy.reflect() == {"completed": 1}
    driven.settled()
    items = driven.client.get("/api/autonomy/revisions", params={"agentId": agent}).json()
    newest: dict[str, Any] = items["items"][0]
    assert newest["revertsRevisionId"] is None and newest["content"]
    return newest


def quoted(content: str) -> str:
    """Learned content as agents are given it: each line quoted as agent-reported evidence."""
    return "\n".join(f"\u00ab{line}\u00bb" for line in content.split("\n") if line.strip())


def claude(client: TestClient, payload: dict[str, Any]) -> dict[str, Any]:
    response = client.post("/hooks/claude", json=payload)
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def context_of(answer_: dict[str, Any]) -> str:
    return str(answer_.get("hookSpecificOutput", {}).get("additionalContext") or "")


def deliveries(client: TestClient, revision_id: str, **params: Any) -> dict[str, Any]:
    head = client.app.state.services.app.recorder.max_notification_id() or 0  # type: ignore[attr-defined]
    response = client.get(
        f"/api/autonomy/revisions/{revision_id}/deliveries",
        params={"minPosition": head, **params},
    )
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def timeline(client: TestClient, session_id: str, **params: Any) -> list[dict[str, Any]]:
    head = client.app.state.services.app.recorder.max_notification_id() or 0  # type: ignore[attr-defined]
    response = client.get(
        f"/api/sessions/{session_id}/timeline", params={"minPosition": head, **params}
    )
    assert response.status_code == 200, response.text
    turns: list[dict[str, Any]] = response.json()["items"]
    return turns


def test_claude_code_gets_its_lessons_at_session_start_and_each_prompt(driven: Driven) -> None:
    api = driven.client
    enable(api, evolution=True)
    first = learn(driven, "claude-code", "a", "pytest exited 2: no module named app")
    second = learn(driven, "claude-code", "b", "git push rejected: non-fast-forward")
    other = learn(driven, "codex", "c", "cargo build failed: linker not found")
    # Deliveries do not depend on evolution: they carry whatever the targets hold.
    enable(api, evolution=False)

    started = claude(api, captured("01-SessionStart.json"))
    prompted = claude(api, captured("02-UserPromptSubmit.json"))
    tool = claude(api, captured("03-PreToolUse.json"))
    for answered, event in ((started, "SessionStart"), (prompted, "UserPromptSubmit")):
        assert answered["hookSpecificOutput"]["hookEventName"] == event
        text = context_of(answered)
        assert first["content"] in text and second["content"] in text
        assert other["content"] not in text  # another runtime's lessons stay its own
        assert len(text.encode()) <= CONTEXT_CAP
    assert tool == {}  # nothing is delivered on tool calls

    session = claude_session(captured("01-SessionStart.json"))
    prompt_id = captured("02-UserPromptSubmit.json")["prompt_id"]
    head = api.app.state.services.app.recorder.max_notification_id()  # type: ignore[attr-defined]
    title = api.get(f"/api/sessions/{session}", params={"minPosition": head}).json()["title"]
    assert title  # named by its first prompt
    for revision in (first, second):
        listed = deliveries(api, revision["id"])
        assert listed["count"] == 2 and len(listed["items"]) == 2
        assert {i["sessionId"] for i in listed["items"]} == {session}
        assert {i["sessionTitle"] for i in listed["items"]} == {title}  # as the page names it
        # Newest first: the prompt's delivery (its turn id), then the SessionStart's.
        assert [i["turnId"] for i in listed["items"]] == [prompt_id, None]
        assert [i["position"] for i in listed["items"]] == sorted(
            (i["position"] for i in listed["items"]), reverse=True
        )
        assert {i["contentDigest"] for i in listed["items"]} == {revision["contentDigest"]}
        assert listed["latestAt"] == listed["items"][0]["at"]
        assert all(i["dispatchId"] and i["taskId"] is None for i in listed["items"])
        one = api.get(f"/api/autonomy/revisions/{revision['id']}").json()
        assert one["deliveries"] == {"count": 2, "latestAt": listed["latestAt"]}
        assert one["supersedes"] is None
    assert deliveries(api, other["id"]) == {"items": [], "count": 0, "latestAt": None}
    # Paging: `before` is the position of the last item seen.
    page = deliveries(api, first["id"], limit=1)
    rest = deliveries(api, first["id"], limit=1, before=page["items"][0]["position"])
    assert [*page["items"], *rest["items"]] == deliveries(api, first["id"])["items"]

    # The session's timeline shows what its turn was given (its SessionStart's and its
    # prompt's deliveries), the same from the read model as from the log.
    [turn] = timeline(api, session)
    delivered = turn["learned"]
    assert {(d["revisionId"], d["contentDigest"]) for d in delivered} == {
        (first["id"], first["contentDigest"]),
        (second["id"], second["contentDigest"]),
    }
    assert len(delivered) == 4 and {d["agentId"] for d in delivered} == {"claude-code"}
    assert timeline(api, session, source="log") == timeline(api, session)


def test_coder_session_start_gets_model_context_once_per_dispatch(settings: Settings) -> None:
    configured = settings.with_(
        coder_hook_secret=SECRET, coder_hook_url=AUDIENCE, coder_hook_timeout_ms=1500
    )
    with quiet_client(configured) as api:
        driven = drive(api, Clock())
        enable(api, evolution=True)
        lesson = learn(driven, "coder", "a", "terraform plan failed: missing provider")
        body, headers = coder_request(
            "session_start", data={"source": "startup"}, dispatch_id="d-start"
        )
        response = api.post("/hooks/coder", content=body, headers=headers)
        assert response.status_code == 200, response.text
        assert lesson["content"] in response.json()["model_context"]
        prompt_body, prompt_headers = coder_request(
            "user_prompt_submit", data={"prompt": "plan it"}, dispatch_id="d-prompt"
        )
        prompted = api.post("/hooks/coder", content=prompt_body, headers=prompt_headers)
        assert lesson["content"] in prompted.json()["model_context"]
        assert deliveries(api, lesson["id"])["count"] == 2
        # A redelivered dispatch gets the answer it got the first time, and is no new delivery.
        again = api.post("/hooks/coder", content=body, headers=headers)
        assert again.json() == response.json()
        assert deliveries(api, lesson["id"])["count"] == 2


@pytest.fixture
def hook_server() -> Iterator[HookServer]:
    server = HookServer()
    yield server
    server.close()


def test_handlers_context_and_lessons_share_the_cap_and_the_newest_lessons_stay(
    settings: Settings, hook_server: HookServer
) -> None:
    hooks = {"UserPromptSubmit": [{"id": "ctx", "type": "http", "url": "$URL/ctx"}]}
    handler_context = "H" * (9 * 1024)
    hook_server.routes["/ctx"] = answer("pass", additionalContext=handler_context)
    with quiet_client(hooks_settings(settings, hook_server, hooks)) as api:
        # Three person-written targets of 3 KiB each, oldest to newest.
        keys = ["lesson.oldest", "lesson.middle", "lesson.newest"]
        for index, key in enumerate(keys):
            edited = api.put(
                f"/api/autonomy/targets/overlay/claude-code/{key}",
                json={"content": f"{key}: " + str(index) * 3 * 1024},
            )
            assert edited.status_code == 200, edited.text
        session = str(uuid4())
        started = claude(api, captured("01-SessionStart.json", session))
        prompted = claude(api, captured("02-UserPromptSubmit.json", session))

        # No handler on SessionStart: the whole budget is the lessons', and all fit.
        assert all(f"{key}: " in context_of(started) for key in keys)
        text = context_of(prompted)
        assert len(text.encode()) <= CONTEXT_CAP
        assert text.startswith(handler_context)  # the handlers' context, untouched, first
        assert "lesson.newest: " in text and "lesson.middle: " in text
        assert "lesson.oldest: " not in text  # the oldest lesson gave way
        [turn] = timeline(api, claude_session(captured("01-SessionStart.json", session)))
        prompt_items = [d for d in turn["learned"] if d["position"] == turn["position"]]
        assert sorted(d["key"] for d in prompt_items) == ["lesson.middle", "lesson.newest"]
        # A person's content is what is delivered: no revision to name.
        assert all(d["revisionId"] is None for d in turn["learned"])
        target = api.get("/api/autonomy/targets/overlay/claude-code/lesson.newest").json()
        assert {d["contentDigest"] for d in prompt_items if d["key"] == "lesson.newest"} == {
            target["contentDigest"]
        }

        # A handler that uses the whole cap leaves no room: nothing learned is carried.
        hook_server.routes["/ctx"] = answer("pass", additionalContext="F" * CONTEXT_CAP)
        full = claude(api, {**captured("02-UserPromptSubmit.json", session), "prompt_id": "p2"})
        assert context_of(full) == "F" * CONTEXT_CAP
        turns = timeline(api, claude_session(captured("01-SessionStart.json", session)))
        assert [t["learned"] for t in turns if t["turnId"] == "p2"] == [[]]

        # An overlay too big for what is left keeps its newest instructions (its last
        # lines); the digest is of exactly what was delivered.
        hook_server.routes["/ctx"] = answer("pass", additionalContext="G" * (12 * 1024))
        lines = [f"instruction {i}: " + "x" * 1000 for i in range(8)]
        edited = api.put(
            "/api/autonomy/targets/overlay/claude-code/lesson.lines",
            json={"content": "\n".join(lines)},
        )
        assert edited.status_code == 200, edited.text
        part = context_of(
            claude(api, {**captured("02-UserPromptSubmit.json", session), "prompt_id": "p3"})
        )
        assert len(part.encode()) <= CONTEXT_CAP
        assert lines[-1] in part and lines[0] not in part and "lesson.newest: " not in part
        kept = [line for line in lines if line in part]
        assert kept == lines[-len(kept) :] and len(kept) >= 2
        turns = timeline(api, claude_session(captured("01-SessionStart.json", session)))
        [items] = [t["learned"] for t in turns if t["turnId"] == "p3"]
        assert [(d["key"], d["contentDigest"]) for d in items] == [
            ("lesson.lines", content_digest("\n".join(kept)))
        ]


def test_after_a_revert_the_next_delivery_lacks_the_content(driven: Driven) -> None:
    api = driven.client
    enable(api, evolution=True)
    kept = learn(driven, "claude-code", "a", "npm ci failed: lockfile out of date")
    reverted = learn(driven, "claude-code", "b", "docker daemon not running")
    enable(api, evolution=False)
    before = context_of(claude(api, captured("01-SessionStart.json", str(uuid4()))))
    assert reverted["content"] in before and kept["content"] in before

    response = api.post(f"/api/autonomy/revisions/{reverted['id']}/revert")
    assert response.status_code == 200, response.text
    compensation = response.json()
    # The compensation lists what it supersedes: the reverted revision's deliveries.
    assert compensation["supersedes"] == {
        "revisionId": reverted["id"],
        "deliveries": {"count": 1, "latestAt": deliveries(api, reverted["id"])["latestAt"]},
    }
    after_session = str(uuid4())
    after = context_of(claude(api, captured("01-SessionStart.json", after_session)))
    assert reverted["content"] not in after and kept["content"] in after
    assert deliveries(api, reverted["id"])["count"] == 1  # the earlier delivery stays listed
    # The compensation restored "no content": it is delivered nowhere.
    assert deliveries(api, compensation["id"])["count"] == 0
    assert api.get(f"/api/autonomy/revisions/{compensation['id']}").json() == compensation


def test_a_user_edit_is_delivered_instead_and_a_hand_back_returns_it_to_evolution(
    driven: Driven,
) -> None:
    api = driven.client
    enable(api, evolution=True, skillCreation=True)

    def outcome(trace: str, how: str) -> dict[str, Any]:
        post_signal(api, agentId="claude-code", traceId=trace, kind="outcome", outcome=how)
        assert driven.autonomy.reflect() == {"completed": 1}
        driven.settled()
        newest: dict[str, Any] = api.get(
            "/api/autonomy/revisions", params={"targetKind": "skill"}
        ).json()["items"][0]
        return newest

    def delivered() -> tuple[str, list[dict[str, Any]]]:
        """What a new session is told at its start, and the skill items its turn lists."""
        start = captured("01-SessionStart.json", str(uuid4()))
        text = context_of(claude(api, start))
        claude(api, captured("02-UserPromptSubmit.json", start["session_id"]))
        [turn] = timeline(api, claude_session(start))
        return text, [d for d in turn["learned"] if d["kind"] == "skill"]

    learned = outcome("a", "ran make test before pushing")
    target_url = f"/api/autonomy/targets/skill/claude-code/{learned['key']}?workspaceId=default"
    text, items = delivered()
    assert quoted(learned["content"]) in text
    assert {d["revisionId"] for d in items} == {learned["id"]}

    edited = api.put(target_url, json={"content": "Run `make check`; it covers the tests."})
    assert edited.status_code == 200 and edited.json()["evolutionManaged"] is False
    text, items = delivered()
    assert "Run `make check`" in text and quoted(learned["content"]) not in text
    assert {(d["revisionId"], d["contentDigest"]) for d in items} == {
        (None, content_digest("Run `make check`; it covers the tests."))
    }

    handed = api.post(target_url.replace("?", "/hand-back?"))
    assert handed.status_code == 200 and handed.json()["evolutionManaged"] is True
    text, items = delivered()
    assert "Run `make check`" in text  # the person's content stays until evolution revises it
    assert {d["revisionId"] for d in items} == {None}
    revised = outcome("b", "ran make check before pushing")
    assert revised["key"] == learned["key"]
    text, items = delivered()
    assert quoted(revised["content"]) in text and "Run `make check`;" not in text
    assert {d["revisionId"] for d in items} == {revised["id"]}


def test_deliveries_survive_a_swapped_replay(driven: Driven, settings: Settings) -> None:
    api = driven.client
    enable(api, evolution=True)
    lesson = learn(driven, "claude-code", "a", "make: *** [build] Error 1")
    enable(api, evolution=False)
    for _ in range(3):
        session = str(uuid4())
        claude(api, captured("01-SessionStart.json", session))
        claude(api, captured("02-UserPromptSubmit.json", session))
    listed = deliveries(api, lesson["id"])
    assert listed["count"] == 6
    services = driven.services
    with services.store.transaction() as cur:
        cur.execute("DELETE FROM rm_learned_deliveries")
    assert deliveries(api, lesson["id"])["count"] == 0
    swapped = run_cli(settings, "replay", "--swap", "--projection", "deliveries")
    assert swapped.returncode == 0, swapped.stdout + swapped.stderr
    assert "swapped: live tables replaced" in swapped.stdout
    assert deliveries(api, lesson["id"]) == listed
    again = run_cli(settings, "replay", "--projection", "deliveries")
    assert again.returncode == 0 and "DRIFT" not in again.stdout, again.stdout


def test_a_revert_racing_deliveries_never_leaves_one_half_told(driven: Driven) -> None:
    api = driven.client
    enable(api, evolution=True)
    lesson = learn(driven, "claude-code", "a", "flake8 found 3 errors")
    enable(api, evolution=False)
    created = api.post("/api/sessions", json={"workspaceId": "default"})
    assert created.status_code == 201, created.text
    session = created.json()["id"]
    go = threading.Event()

    def prompt(index: int) -> tuple[str, bool]:
        go.wait(10)
        response = api.post(
            f"/api/sessions/{session}/events",
            json={
                "event": "UserPromptSubmit",
                "agent": "claude-code",
                "turnId": f"t{index}",
                "prompt": f"task {index}",
            },
        )
        assert response.status_code == 200, response.text
        body = response.json()
        return body["dispatchId"], lesson["content"] in (body.get("additionalContext") or "")

    def revert() -> int:
        go.wait(10)
        response = api.post(f"/api/autonomy/revisions/{lesson['id']}/revert")
        return int(response.status_code)

    with ThreadPoolExecutor(8) as pool:
        prompts = [pool.submit(prompt, i) for i in range(24)]
        reverting = pool.submit(revert)
        go.set()
        answers = [p.result(timeout=60) for p in prompts]
        assert reverting.result(timeout=60) == 200
    listed = {i["dispatchId"] for i in deliveries(api, lesson["id"], limit=200)["items"]}
    carried = {dispatch for dispatch, told in answers if told}
    # Each delivery is either before the revert (carried and listed) or after (neither).
    assert carried == listed
    _, told_after = prompt(99)
    assert told_after is False
    # The session created over the API had its SessionStart answered to nobody: no delivery.
    assert all(i["turnId"] is not None for i in deliveries(api, lesson["id"], limit=200)["items"])


def test_a_version_3_dispatch_loads_projects_replays_and_verifies(driven: Driven) -> None:
    services = driven.services
    dispatch = next(hook_dispatch_created())
    assert isinstance(dispatch, HookDispatch)
    mapper = services.app.mapper
    stored = mapper.to_stored_event(dispatch.collect_events()[0])
    state = mapper.transcoder.decode(stored.state)
    assert state.pop("learned") is None
    state["class_version"] = 3
    run = {"handler_id": "guard", "outcome": "deny", "failure": None, "reason": "no"}
    state["runs"] = [{**run, "duration_ms": 4, "continue_capped": False}]
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
    reloaded: HookDispatch = services.app.repository.get(dispatch.id)
    assert reloaded.learned is None and reloaded.facts == dispatch.facts
    audited = services.store.query(
        "SELECT dispatch_id FROM rm_hook_audit WHERE dispatch_id = ?", (str(dispatch.id),)
    )
    assert len(audited) == 1
    assert services.store.query("SELECT * FROM rm_learned_deliveries") == []
    reports = replay(services.app, services.store, services.projections, swap=True)
    assert [r.name for r in reports if r.drift] == []
    report = verify_log(services.app, services.store, None)
    assert report.ok, report


def test_bad_deliveries_requests_are_refused(driven: Driven) -> None:
    api = driven.client
    missing = api.get(f"/api/autonomy/revisions/{uuid4()}/deliveries")
    assert (missing.status_code, missing.json()["error"]) == (404, "not_found")
    assert api.get("/api/autonomy/revisions/nope/deliveries").status_code == 422
    enable(api, evolution=True)
    lesson = learn(driven, "claude-code", "a", "mypy: 2 errors")
    for params in ({"limit": 0}, {"limit": 201}, {"before": 0}, {"before": "x"}):
        refused = api.get(f"/api/autonomy/revisions/{lesson['id']}/deliveries", params=params)
        assert refused.status_code == 422, (params, refused.text)


@pytest.mark.slow
def test_the_command_hook_delivers_and_sees_another_processs_change(
    settings: Settings, tmp_path: Path
) -> None:
    server = Server(settings, tmp_path / "serve.log")
    try:
        server.wait_ready()
        env = {**env_for(settings), "TACHOGRAPH_URL": server.url}
        target = f"{server.url}/api/autonomy/targets/overlay/claude-code/lesson.migrations"
        edited = httpx.put(target, json={"content": "Run the migrations first."}, timeout=10)
        assert edited.status_code == 200, edited.text

        def told(payload: dict[str, Any]) -> str:
            result = run_command_hook(env, payload)
            assert result.returncode == 0, result.stderr
            return context_of(json.loads(result.stdout))

        session = str(uuid4())
        assert "Run the migrations first." in told(captured("01-SessionStart.json", session))
        assert "Run the migrations first." in told(captured("02-UserPromptSubmit.json", session))
        # Another process changes the target (and may apply it to the read models before
        # the server's runner does): the server's next deliveries follow within moments.
        other = build_services(settings)
        try:
            assert other.autonomy is not None
            other.autonomy.autonomy.edit_target(
                "overlay", "claude-code", "lesson.migrations", "Seed the database first.", "test"
            )
            other.runner.catch_up()
        finally:
            other.stop()
        deadline = time.monotonic() + 10
        text = ""
        while time.monotonic() < deadline:
            text = told(captured("01-SessionStart.json", str(uuid4())))
            if "Seed the database first." in text:
                break
            time.sleep(0.2)
        assert "Seed the database first." in text and "Run the migrations first." not in text
    finally:
        server.kill()
