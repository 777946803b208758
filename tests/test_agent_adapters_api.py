"""Agent adapters end to end: Claude Code (HTTP route and command hook) and Coder's webhook."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from uuid import UUID

import jwt
import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from bootstrap import Services
from domain.lifecycle import agent_session_uuid
from infra.settings import Settings
from tests.hook_server import HookServer, answer
from tests.support import Server, env_for, watch_offloads
from tests.test_hook_gateway_api import hooks_settings

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "claude-code"
FIXTURE_NAMES = sorted(p.name for p in FIXTURES.glob("*.json"))
SECRET = "c" * 40
AUDIENCE = "https://tachograph.test/hooks/coder"


def load_fixture(name: str) -> dict[str, Any]:
    document = json.loads((FIXTURES / name).read_text())
    payload: dict[str, Any] = document.get("payload", document)
    return payload


def claude_session(payload: dict[str, Any]) -> str:
    return str(agent_session_uuid(f"claude-code:{payload['session_id']}"))


@pytest.fixture
def hook_server() -> Iterator[HookServer]:
    server = HookServer()
    yield server
    server.close()


@pytest.fixture
def adapter_client(
    request: pytest.FixtureRequest, settings: Settings, hook_server: HookServer
) -> Iterator[TestClient]:
    configured = hooks_settings(settings, hook_server, getattr(request, "param", {}))
    configured = configured.with_(
        coder_hook_secret=SECRET, coder_hook_url=AUDIENCE, coder_hook_timeout_ms=1500
    )
    with TestClient(create_app(configured), raise_server_exceptions=False) as client:
        yield client


def test_fixtures_exist() -> None:
    assert len(FIXTURE_NAMES) >= 20


@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_every_claude_fixture_is_accepted_mapped_and_answered(
    adapter_client: TestClient, name: str
) -> None:
    payload = load_fixture(name)
    response = adapter_client.post("/hooks/claude", json=payload)
    assert response.status_code == 200, response.text
    assert response.json() == {}  # no handlers: pass renders as the empty answer
    session_id = claude_session(payload)
    position = response.headers["x-tachograph-position"]
    session = adapter_client.get(f"/api/sessions/{session_id}", params={"minPosition": position})
    assert session.status_code == 200
    assert session.json()["agent"] == "claude-code"
    assert session.json()["agentSessionId"] == payload["session_id"]
    assert session.json()["workspaceId"] == "default"
    events = [
        r["event"] for r in adapter_client.get(f"/api/sessions/{session_id}/hooks").json()["items"]
    ]
    assert events == [payload["hook_event_name"]]


def test_a_known_sessions_claude_hooks_are_answered_from_the_event_loop_alike(
    adapter_client: TestClient,
) -> None:
    services: Services = adapter_client.app.state.services  # type: ignore[attr-defined]
    offloaded = watch_offloads(services.ingest)
    native = load_fixture("SessionStart-1.json")["session_id"]
    created = adapter_client.post("/hooks/claude", json=load_fixture("SessionStart-1.json"))
    assert created.status_code == 200 and len(offloaded) == 1  # a new session: created
    before = log_size(adapter_client)
    for name in FIXTURE_NAMES:
        payload = {**load_fixture(name), "session_id": native}
        offloaded.clear()
        first = adapter_client.post("/hooks/claude", json=payload)
        # The same hook again as a tool call of its own, so that it is not taken for a
        # redelivery of the first: appended after it, answered alike.
        if "tool_use_id" in payload:
            payload["tool_use_id"] += "-again"
        again = adapter_client.post("/hooks/claude", json=payload)
        assert offloaded == [], name  # both answered without leaving the event loop
        assert first.status_code == again.status_code == 200, name
        assert first.content == again.content == b"{}", name
        assert set(first.headers) == set(again.headers), name
        assert int(again.headers["x-tachograph-position"]) > int(
            first.headers["x-tachograph-position"]
        )
        redelivered = adapter_client.post("/hooks/claude", json=payload)
        if "tool_use_id" in payload:  # answered from the log, appended nowhere
            assert (
                redelivered.headers["x-tachograph-position"]
                == (again.headers["x-tachograph-position"])
            )
    tool_events = sum("tool_use_id" in load_fixture(name) for name in FIXTURE_NAMES)
    # Each fixture twice, and the third time too when nothing identifies it as a repeat.
    assert log_size(adapter_client) == before + 3 * len(FIXTURE_NAMES) - tool_events
    session = adapter_client.get(
        f"/api/sessions/{claude_session(load_fixture('SessionStart-1.json'))}/hooks",
        params={"minPosition": redelivered.headers["x-tachograph-position"]},
    ).json()["items"]
    assert len(session) == 1 + 3 * len(FIXTURE_NAMES) - tool_events


def test_bad_claude_bodies_are_refused_before_anything_is_recorded(
    adapter_client: TestClient,
) -> None:
    payload = load_fixture("PostToolUse-1.json")
    accepted = adapter_client.post("/hooks/claude", json=payload)
    assert accepted.status_code == 200
    for content, status in [
        (b"{", 400),
        (b"[1]", 422),
        (json.dumps({**payload, "tool_input": "a\u0000b"}).encode(), 422),
        (json.dumps({**payload, "tool_use_id": "t" * 300}).encode(), 422),
    ]:
        sent = adapter_client.post(
            "/hooks/claude", content=content, headers={"content-type": "application/json"}
        )
        assert sent.status_code == status, (content[:40], sent.text)
        assert sent.json()["error"] in ("invalid_json", "validation_error", "invalid_hook_payload")
    bad_header = adapter_client.post(
        "/hooks/claude", json=payload, headers={"x-tachograph-session-id": "x"}
    )
    assert bad_header.status_code == 422
    after = {"after": accepted.headers["x-tachograph-position"]}
    assert adapter_client.get("/api/events", params=after).json()["events"] == []


def test_out_of_order_lifecycle_from_real_payloads(adapter_client: TestClient) -> None:
    names = [
        "SessionStart-2.json",
        "UserPromptSubmit-1.json",
        "PreToolUse-1.json",
        "PostToolUse-1.json",
        "SessionEnd-2.json",
        "StopFailure-2.json",
    ]
    session_id = None
    for name in names:
        payload = load_fixture(name)
        payload["session_id"] = "same-session"
        sent = adapter_client.post("/hooks/claude", json=payload)
        assert sent.status_code == 200
        session_id = claude_session(payload)
    row = adapter_client.get(
        f"/api/sessions/{session_id}", params={"minPosition": sent.headers["x-tachograph-position"]}
    ).json()
    assert row["status"] == "ended"
    assert row["title"] == load_fixture("UserPromptSubmit-1.json")["prompt"].splitlines()[0][:80]


def test_explicit_session_and_workspace_headers(
    adapter_client: TestClient, settings: Settings
) -> None:
    (settings.workspace_root / "proj").mkdir()
    adapter_client.post("/api/workspaces", json={"id": "proj", "path": "proj"})
    session_id = "6f1c5e1a-1111-4222-8333-944455556666"
    payload = load_fixture("UserPromptSubmit-1.json")
    sent = adapter_client.post(
        "/hooks/claude",
        json=payload,
        headers={"x-tachograph-session-id": session_id, "x-tachograph-workspace": "proj"},
    )
    row = adapter_client.get(
        f"/api/sessions/{session_id}", params={"minPosition": sent.headers["x-tachograph-position"]}
    ).json()
    assert row["workspaceId"] == "proj"
    empty_header = adapter_client.post(
        "/hooks/claude", json=payload, headers={"x-tachograph-session-id": ""}
    )
    assert empty_header.status_code == 200  # empty = absent: falls back to the native id
    bad = adapter_client.post(
        "/hooks/claude", json=payload, headers={"x-tachograph-session-id": "x"}
    )
    assert bad.status_code == 422


def test_bad_claude_bodies_are_4xx(adapter_client: TestClient) -> None:
    assert adapter_client.post("/hooks/claude", content=b"{").status_code == 400
    assert adapter_client.post("/hooks/claude", json=[1]).status_code == 422
    assert adapter_client.post("/hooks/claude", json={"session_id": "s"}).status_code == 422
    unknown = adapter_client.post(
        "/hooks/claude", json={"hook_event_name": "TaskCreated", "session_id": "s", "new_field": 1}
    )
    assert unknown.status_code == 200 and unknown.json() == {}


@pytest.mark.parametrize(
    "adapter_client",
    [
        {
            "PreToolUse": [{"id": "policy", "type": "http", "url": "$URL/pre"}],
            "UserPromptSubmit": [{"id": "rewrite", "type": "http", "url": "$URL/prompt"}],
            "Stop": [{"id": "again", "type": "http", "url": "$URL/stop"}],
            "SessionStart": [{"id": "ctx", "type": "http", "url": "$URL/ctx"}],
        }
    ],
    indirect=True,
)
def test_decisions_render_in_claude_format(
    adapter_client: TestClient, hook_server: HookServer
) -> None:
    hook_server.routes["/ctx"] = answer("pass", additionalContext="Remember the style guide")
    hook_server.routes["/prompt"] = answer("modify", replacement="a safer prompt")
    hook_server.routes["/stop"] = answer("continue", reason="tests still fail")
    start = adapter_client.post("/hooks/claude", json=load_fixture("SessionStart-1.json")).json()
    assert start == {
        "hookSpecificOutput": {
            "hookEventName": "SessionStart",
            "additionalContext": "Remember the style guide",
        }
    }
    hook_server.routes["/pre"] = answer("deny", reason="no writes here")
    deny = adapter_client.post("/hooks/claude", json=load_fixture("PreToolUse-1.json")).json()
    assert deny == {
        "hookSpecificOutput": {
            "hookEventName": "PreToolUse",
            "permissionDecision": "deny",
            "permissionDecisionReason": "no writes here",
        }
    }
    hook_server.routes["/pre"] = answer(
        "modify", replacement={"file_path": "/tmp/x", "content": ""}
    )
    modify = adapter_client.post("/hooks/claude", json=load_fixture("PreToolUse-2.json")).json()
    assert modify["hookSpecificOutput"]["permissionDecision"] == "allow"
    assert modify["hookSpecificOutput"]["updatedInput"] == {"file_path": "/tmp/x", "content": ""}
    prompt_payload = load_fixture("UserPromptSubmit-1.json")
    rewrite = adapter_client.post("/hooks/claude", json=prompt_payload)
    assert rewrite.json()["decision"] == "block"
    assert "a safer prompt" in rewrite.json()["reason"]
    stop = adapter_client.post("/hooks/claude", json=load_fixture("Stop-1.json")).json()
    assert stop == {"decision": "block", "reason": "tests still fail"}
    # The audit record says the prompt rewrite was rendered as a block.
    session_id = claude_session(prompt_payload)
    dispatches = adapter_client.get("/api/events", params={"type": "HookDispatch.Created"}).json()[
        "events"
    ]
    notes = [
        e["data"]["note"]
        for e in dispatches
        if e["data"]["event_name"] == "UserPromptSubmit" and e["data"]["session_id"] == session_id
    ]
    assert notes and notes[0]


def test_api_key_guards_the_claude_route(settings: Settings) -> None:
    with TestClient(create_app(settings.with_(api_key="k-123"))) as client:
        payload = load_fixture("PreToolUse-1.json")
        assert client.post("/hooks/claude", json=payload).status_code == 401
        ok = client.post("/hooks/claude", json=payload, headers={"x-tachograph-key": "k-123"})
        assert ok.status_code == 200


# Coder


def coder_request(
    type_: str = "pre_tool_use",
    data: dict[str, Any] | None = None,
    dispatch_id: str = "disp-1",
    chat_id: str = "chat-1",
    **claim_overrides: Any,
) -> tuple[bytes, dict[str, str]]:
    body = json.dumps(
        {
            "type": type_,
            "meta": {
                "dispatch_id": dispatch_id,
                "schema_version": 1,
                "chat_id": chat_id,
                "owner_id": "owner",
                "turn_id": "turn-9",
            },
            "data": data
            if data is not None
            else {"tool_use_id": "tu", "tool_name": "bash", "tool_input": {"cmd": "ls"}},
        }
    ).encode()
    now = int(time.time())
    claims = {
        "aud": AUDIENCE,
        "sub": f"coder:chat:{chat_id}",
        "jti": dispatch_id,
        "type": type_,
        "iat": now,
        "nbf": now - 1,
        "exp": now + 60,
        "schema_version": 1,
        "body_sha256": hashlib.sha256(body).hexdigest(),
        **claim_overrides,
    }
    token = jwt.encode(claims, SECRET, algorithm="HS256")
    return body, {"authorization": f"Bearer {token}", "content-type": "application/json"}


def log_size(client: TestClient) -> int:
    return len(client.get("/api/events").json()["events"])


def rejected_count(client: TestClient) -> float:
    lines = client.get("/metrics").text.splitlines()
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in lines
        if line.startswith("tachograph_webhook_rejected_total{")
    )


@pytest.mark.parametrize(
    "adapter_client",
    [{"PreToolUse": [{"id": "policy", "type": "http", "url": "$URL/pre"}]}],
    indirect=True,
)
def test_coder_webhook_round_trip_with_signed_answer(
    adapter_client: TestClient, hook_server: HookServer
) -> None:
    hook_server.routes["/pre"] = answer("deny", reason="not on main")
    body, headers = coder_request()
    response = adapter_client.post("/hooks/coder", content=body, headers=headers)
    assert response.status_code == 200
    assert response.json() == {
        "permission": {"decision": "deny", "reason": "not on main"},
        "user_message": "not on main",
    }
    signature = jwt.decode(
        response.headers["Coder-Hook-Signature"], SECRET, algorithms=["HS256"], audience=AUDIENCE
    )
    assert signature["jti"] == "disp-1" and signature["type"] == "pre_tool_use"
    assert signature["sub"] == "coder:chat:chat-1"
    assert signature["body_sha256"] == hashlib.sha256(response.content).hexdigest()
    sent = hook_server.bodies("/pre")[0]
    assert sent["event"] == "PreToolUse" and sent["turnId"] == "turn-9"
    assert sent["sessionId"] == str(agent_session_uuid("coder:chat-1"))
    size = log_size(adapter_client)
    replay = adapter_client.post("/hooks/coder", content=body, headers=headers)
    assert replay.json() == response.json()
    assert log_size(adapter_client) == size
    assert len(hook_server.bodies("/pre")) == 1


@pytest.mark.parametrize(
    ("overrides", "tamper"),
    [
        ({"aud": "https://other/hooks/coder"}, False),
        ({"exp": 1}, False),
        ({"jti": "other"}, False),
        ({"type": "stop"}, False),
        ({"sub": "coder:chat:else"}, False),
        ({"schema_version": 2}, False),
        ({}, True),
    ],
)
def test_coder_verification_failures_store_nothing(
    adapter_client: TestClient, overrides: dict[str, Any], tamper: bool
) -> None:
    body, headers = coder_request(**overrides)
    if tamper:
        body = body.replace(b'"ls"', b'"rm"')
    size = log_size(adapter_client)
    before = rejected_count(adapter_client)
    response = adapter_client.post("/hooks/coder", content=body, headers=headers)
    assert response.status_code == 401
    assert "permission" not in response.json()
    assert log_size(adapter_client) == size
    assert rejected_count(adapter_client) == before + 1


@pytest.mark.parametrize(
    "adapter_client",
    [{"PreToolUse": [{"id": "slow", "type": "http", "url": "$URL/slow", "timeoutMs": 3000}]}],
    indirect=True,
)
def test_coder_slow_dispatch_is_contained_within_half_the_timeout(
    adapter_client: TestClient, hook_server: HookServer
) -> None:
    hook_server.routes["/slow"] = answer("pass")
    hook_server.delays["/slow"] = 1.5
    body, headers = coder_request()
    started = time.monotonic()
    response = adapter_client.post("/hooks/coder", content=body, headers=headers)
    elapsed = time.monotonic() - started
    assert response.json()["permission"]["decision"] == "deny"
    assert elapsed < 1.4  # answered at ~0.75 s, before the handler's 1.5 s answer
    observational, obs_headers = coder_request("post_compact", data={}, dispatch_id="disp-2")
    hook_server.routes["/slow"] = answer("pass")
    assert (
        adapter_client.post("/hooks/coder", content=observational, headers=obs_headers).json() == {}
    )


def test_coder_route_is_404_when_unconfigured(settings: Settings) -> None:
    with TestClient(create_app(settings)) as client:
        body, headers = coder_request()
        assert client.post("/hooks/coder", content=body, headers=headers).status_code == 404


# The command hook as a real subprocess against a real server


def run_command_hook(
    env: dict[str, str], payload: dict[str, Any], *args: str
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cli.main", "hook", "claude", *args],
        input=json.dumps(payload),
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
    )


@pytest.mark.slow
@pytest.mark.parametrize("store_kind", ["sqlite"], indirect=True)
def test_command_hook_relays_every_fixture(settings: Settings, tmp_path: Path) -> None:
    server = Server(settings, tmp_path / "serve.log")
    try:
        server.wait_ready()
        env = {**env_for(settings), "TACHOGRAPH_URL": server.url}
        for name in FIXTURE_NAMES:
            payload = load_fixture(name)
            result = run_command_hook(env, payload)
            assert result.returncode == 0, result.stderr
            assert json.loads(result.stdout) == {}, name
        import httpx

        session_id = claude_session(load_fixture("PreToolUse-1.json"))
        row = httpx.get(f"{server.url}/api/sessions/{session_id}").json()
        assert row["agent"] == "claude-code"
    finally:
        server.kill()


@pytest.mark.parametrize("store_kind", ["sqlite"], indirect=True)
def test_command_hook_with_server_down_exits_0_quickly_and_logs(
    settings: Settings, tmp_path: Path
) -> None:
    env = {**env_for(settings), "TACHOGRAPH_URL": "http://127.0.0.1:9"}
    started = time.monotonic()
    result = run_command_hook(env, load_fixture("PreToolUse-1.json"))
    assert time.monotonic() - started < 2
    assert (result.returncode, result.stdout) == (0, "")
    log_lines = (settings.data_dir / "hooks.log").read_text().splitlines()
    assert len(log_lines) == 1 and json.loads(log_lines[0])["event"] == "PreToolUse"
    closed = run_command_hook(env, load_fixture("PreToolUse-1.json"), "--fail-closed")
    assert json.loads(closed.stdout)["hookSpecificOutput"]["permissionDecision"] == "deny"


def test_session_uuid_is_uuid5_of_agent_and_native_id() -> None:
    assert agent_session_uuid("claude-code:abc") == agent_session_uuid("claude-code:abc")
    assert UUID(str(agent_session_uuid("coder:x"))).version == 5


def test_either_path_answers_the_same_bytes_and_stores_the_same_event(
    settings: Settings,
) -> None:
    """Whichever path through the service answers a Claude Code hook (the event loop's,
    for a known session and no handler to run, or the thread pool's), the answer's bytes
    and the stored HookDispatch are the same: with a handler that denies, one that
    rewrites, and none."""
    server = HookServer()
    server.routes["/deny"] = answer("deny", reason="no force pushes")
    server.routes["/modify"] = answer("modify", replacement={"command": "git status"})
    hooks = {
        "PreToolUse": [
            {"id": "deny", "type": "http", "url": "$URL/deny", "matcher": ["Bash"]},
            {"id": "modify", "type": "http", "url": "$URL/modify", "matcher": ["Write"]},
        ]
    }
    try:
        app = create_app(hooks_settings(settings, server, hooks))
        with TestClient(app, raise_server_exceptions=False) as client:
            services: Services = client.app.state.services  # type: ignore[attr-defined]
            offloaded = watch_offloads(services.ingest)
            start = load_fixture("SessionStart-1.json")
            assert client.post("/hooks/claude", json=start).status_code == 200
            bodies = [
                {"tool_name": "Bash", "tool_input": {"command": "git push --force"}},
                {"tool_name": "Write", "tool_input": {"file_path": "a.txt", "content": "x"}},
                {"tool_name": "Read", "tool_input": {"file_path": "a.txt"}},
            ]
            for n, body in enumerate(bodies):
                payload = {
                    **load_fixture("PreToolUse-1.json"),
                    **body,
                    "session_id": start["session_id"],
                }
                answers, stored = [], []
                for via in ("loop", "pool"):
                    payload["tool_use_id"] = f"toolu_{n}_{via}"
                    if via == "pool":  # a session to look up first: a worker thread
                        services.ingest.known.forget(UUID(claude_session(start)))
                    offloaded.clear()
                    sent = client.post("/hooks/claude", json=payload)
                    assert sent.status_code == 200, sent.text
                    position = int(sent.headers["x-tachograph-position"])
                    event = client.get(
                        "/api/events", params={"after": position - 1, "limit": 1}
                    ).json()["events"][0]
                    assert event["position"] == position and event["type"] == (
                        "HookDispatch.Created"
                    )
                    answers.append((sent.content, sorted(sent.headers)))
                    stored.append(event["data"])
                    # Only Read has no handler to run: without a session to look up, it
                    # never leaves the event loop.
                    assert bool(offloaded) == (n != 2 or via == "pool"), via
                on_loop, in_pool = stored
                for data in stored:  # what tells the two calls apart, and nothing else
                    assert data.pop("tool_call_id").startswith(f"toolu_{n}_")
                    assert data.pop("event_id").startswith("claude-code:")
                    assert data.pop("dispatch_id") != ""
                    assert data.pop("received_at") is not None  # when each arrived
                    for run in data["runs"]:  # the handler's own time, measured per call
                        assert isinstance(run.pop("duration_ms"), int)
                assert answers[0] == answers[1], body
                assert on_loop == in_pool, body
            assert json.loads(answers[0][0]) == {}  # the last, Read, had no handler
    finally:
        server.close()


CAPTURED = Path(__file__).resolve().parent / "fixtures" / "claude-code-2.1.328"


@pytest.mark.parametrize(
    "capture",
    [
        "perm_allow/04-PermissionRequest.json",
        "basic/05-PostToolBatch.json",
        "basic/09-MessageDisplay.json",
    ],
)
def test_claude_codes_observational_events_are_recorded_and_answered_pass(
    adapter_client: TestClient, capture: str
) -> None:
    # Claude Code 2.1.328 fires these beyond the normalised set; `hook install claude`
    # registers them, and no handler can change their course.
    payload = json.loads((CAPTURED / capture).read_text())
    response = adapter_client.post("/hooks/claude", json=payload)

    assert response.status_code == 200 and response.json() == {}
    rows = adapter_client.get(
        f"/api/sessions/{claude_session(payload)}/hooks",
        params={"minPosition": response.headers["x-tachograph-position"]},
    ).json()["items"]
    assert [(r["event"], r["outcome"]) for r in rows] == [(payload["hook_event_name"], "pass")]


def test_session_start_gives_claude_code_the_title_an_operator_set(
    adapter_client: TestClient,
) -> None:
    created = adapter_client.post(
        "/api/sessions", json={"workspaceId": "default", "title": "Fix the login bug"}
    )
    assert created.status_code == 201, created.text
    session_id = created.json()["id"]
    start = load_fixture("SessionStart-1.json")
    headers = {"x-tachograph-session-id": session_id}

    answer = adapter_client.post("/hooks/claude", json=start, headers=headers).json()
    assert answer == {
        "hookSpecificOutput": {"hookEventName": "SessionStart", "sessionTitle": "Fix the login bug"}
    }
    renamed = adapter_client.patch(f"/api/sessions/{session_id}", json={"title": "Login, take 2"})
    assert renamed.status_code == 200, renamed.text
    resumed = adapter_client.post(
        "/hooks/claude", json={**start, "source": "resume"}, headers=headers
    ).json()
    assert resumed["hookSpecificOutput"]["sessionTitle"] == "Login, take 2"
    # Only SessionStart carries it; the prompt's answer stays as it was.
    prompt = {**load_fixture("UserPromptSubmit-1.json"), "session_id": start["session_id"]}
    assert adapter_client.post("/hooks/claude", json=prompt, headers=headers).json() == {}


def test_a_session_without_an_operators_title_starts_without_one(
    adapter_client: TestClient,
) -> None:
    start = load_fixture("SessionStart-1.json")
    prompt = {**load_fixture("UserPromptSubmit-1.json"), "session_id": start["session_id"]}
    assert adapter_client.post("/hooks/claude", json=start).json() == {}
    asked = adapter_client.post("/hooks/claude", json=prompt)
    session = adapter_client.get(
        f"/api/sessions/{claude_session(start)}",
        params={"minPosition": asked.headers["x-tachograph-position"]},
    ).json()
    # The prompt now titles the session, but that title is Tachograph's, not the operator's.
    assert session["title"] and not session["titleLocked"]
    again = adapter_client.post("/hooks/claude", json={**start, "source": "resume"})
    assert again.json() == {}


def test_the_command_hooks_registration_names_the_event(adapter_client: TestClient) -> None:
    # The command hook relays Claude Code's payload untouched and names the event it was
    # registered for beside it; the registration wins, as it always has.
    payload = {**load_fixture("Stop-1.json"), "hook_event_name": "Nope"}
    answered = adapter_client.post(
        "/hooks/claude", json=payload, headers={"x-tachograph-event": "Stop"}
    )
    assert answered.status_code == 200, answered.text
    rows = adapter_client.get(
        f"/api/sessions/{claude_session(payload)}/hooks",
        params={"minPosition": answered.headers["x-tachograph-position"]},
    ).json()["items"]
    assert [r["event"] for r in rows] == ["Stop"]
