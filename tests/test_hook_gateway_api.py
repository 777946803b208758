"""Hook gateway through the HTTP API, on both stores, against a real loopback handler."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from bootstrap import Services
from domain.hook_audit_retention import prune_hook_audit
from infra.settings import Settings
from projections.rebuild import rebuild, table_digest
from projections.registry import all_projections
from tests.hook_server import HookServer, answer
from tests.support import watch_offloads


@pytest.fixture
def hook_server() -> Iterator[HookServer]:
    server = HookServer()
    yield server
    server.close()


def hooks_settings(settings: Settings, server: HookServer, hooks: dict[str, Any]) -> Settings:
    config = {"version": 1, "hooks": hooks}
    env = {
        "TACHOGRAPH_HOOKS": json.dumps(config).replace("$URL", server.url),
        "TACHOGRAPH_HOOK_ALLOW_INSECURE_LOOPBACK": "1",
        "HOOK_SECRET": "s3cret-value",
    }
    parsed = Settings.from_env(env)
    return settings.with_(
        hooks=parsed.hooks, hook_allow_insecure_loopback=True, secrets=parsed.secrets
    )


@pytest.fixture
def gateway_client(
    request: pytest.FixtureRequest, settings: Settings, hook_server: HookServer
) -> Iterator[TestClient]:
    hooks = getattr(request, "param", {})
    app = create_app(hooks_settings(settings, hook_server, hooks))
    with TestClient(app, raise_server_exceptions=False) as client:
        yield client


def new_session(client: TestClient) -> str:
    return str(client.post("/api/sessions", json={"workspaceId": "default"}).json()["id"])


def post(client: TestClient, session_id: str, **body: Any) -> Any:
    return client.post(f"/api/sessions/{session_id}/events", json=body)


def read_after(client: TestClient, url: str, response: Any) -> Any:
    """GET a read model once it holds the event a hook route acknowledged."""
    position = response.headers["x-tachograph-position"]
    return client.get(url, params={"minPosition": position}).json()


def log_size(client: TestClient) -> int:
    return len(client.get("/api/events").json()["events"])


def test_event_without_handlers_passes_and_is_audited(gateway_client: TestClient) -> None:
    session_id = new_session(gateway_client)
    response = post(gateway_client, session_id, event="PostToolUse", toolName="Bash", turnId="t1")
    assert response.status_code == 200
    decision = response.json()
    assert decision["outcome"] == "pass" and set(decision) == {"outcome", "dispatchId"}
    position = response.headers["x-tachograph-position"]
    records = gateway_client.get(
        f"/api/sessions/{session_id}/hooks", params={"minPosition": position}
    ).json()["items"]
    assert [r["event"] for r in records] == ["SessionStart", "PostToolUse"]
    assert set(records[1]) == {
        "id",
        "dispatchId",
        "turnId",
        "event",
        "handlerId",
        "outcome",
        "failure",
        "reason",
        "durationMs",
        "at",
        "policy",
    }
    assert records[1]["turnId"] == "t1" and records[1]["dispatchId"] == decision["dispatchId"]
    assert records[1]["policy"] is None  # no policy rule matched


def test_retried_event_id_returns_stored_decision_and_appends_nothing(
    gateway_client: TestClient,
) -> None:
    session_id = new_session(gateway_client)
    first = post(gateway_client, session_id, event="PostToolUse", eventId="e-1")
    size = log_size(gateway_client)
    again = post(gateway_client, session_id, event="PostToolUse", eventId="e-1")
    assert again.json() == first.json()
    assert log_size(gateway_client) == size


def test_events_without_an_event_id_get_new_ids_in_time_order(
    gateway_client: TestClient,
) -> None:
    """Version-7 ids: the log's key index takes them at its end, not on a random page."""
    session_id = new_session(gateway_client)
    ids = []
    for _ in range(3):
        ids.append(UUID(post(gateway_client, session_id, event="PostToolUse").json()["dispatchId"]))
        time.sleep(0.002)  # the order is the millisecond's: ids of one millisecond differ
    assert [i.version for i in ids] == [7, 7, 7] and len(set(ids)) == 3
    assert sorted(ids, key=lambda i: i.hex) == ids
    now_ms = time.time_ns() // 1_000_000
    assert 0 <= now_ms - int(ids[-1].hex[:12], 16) < 60_000
    # With an eventId the id stays derived from it, so a retry finds its dispatch.
    derived = post(gateway_client, session_id, event="PostToolUse", eventId="e-7").json()
    assert UUID(derived["dispatchId"]).version == 5


def test_session_info_is_derived_from_hooks(gateway_client: TestClient) -> None:
    c = gateway_client
    session_id = new_session(c)
    url = f"/api/sessions/{session_id}"
    assert c.get(url).json()["status"] == "idle"
    sent = post(
        c,
        session_id,
        event="UserPromptSubmit",
        agent="claude-code",
        agentSessionId="native-1",
        prompt="Fix the login bug\nsecond line",
    )
    row = read_after(c, url, sent)
    assert row["status"] == "working"
    assert (row["title"], row["agent"], row["agentSessionId"]) == (
        "Fix the login bug",
        "claude-code",
        "native-1",
    )
    post(c, session_id, event="UserPromptSubmit", prompt="Another prompt")
    assert read_after(c, url, post(c, session_id, event="Notification"))["status"] == "waiting"
    sent = post(c, session_id, event="Stop", lastAssistantMessage="Done: " + "x" * 600)
    row = read_after(c, url, sent)
    assert row["title"] == "Fix the login bug"
    assert row["status"] == "idle" and row["summary"].startswith("Done")
    assert len(row["summary"]) == 500
    assert row["firstSignalAt"] <= row["lastSignalAt"]
    post(c, session_id, event="SessionEnd")
    late = post(c, session_id, event="StopFailure")  # arrives late, as real clients do
    assert read_after(c, url, late)["status"] == "ended"


def test_locked_title_is_never_overwritten(gateway_client: TestClient) -> None:
    session_id = new_session(gateway_client)
    gateway_client.patch(f"/api/sessions/{session_id}", json={"title": "Mine"})
    sent = post(gateway_client, session_id, event="UserPromptSubmit", prompt="Hook title")
    assert read_after(gateway_client, f"/api/sessions/{session_id}", sent)["title"] == "Mine"


def test_silent_session_shows_no_signal_after_grace(settings: Settings) -> None:
    with TestClient(create_app(settings.with_(no_signal_grace_s=0))) as client:
        session_id = new_session(client)
        assert client.get(f"/api/sessions/{session_id}").json()["status"] == "no_signal"


@pytest.mark.parametrize(
    "gateway_client",
    [{"PreToolUse": [{"id": "policy", "type": "http", "url": "$URL/deny", "matcher": ["Bash"]}]}],
    indirect=True,
)
def test_matching_handler_denies_and_other_tools_pass(
    gateway_client: TestClient, hook_server: HookServer
) -> None:
    hook_server.routes["/deny"] = answer("deny", reason="no shell")
    session_id = new_session(gateway_client)
    denied = post(
        gateway_client,
        session_id,
        event="PreToolUse",
        toolName="Bash",
        toolInput={"command": "rm -rf /"},
        turnId="t",
    )
    assert denied.json()["outcome"] == "deny" and denied.json()["reason"] == "no shell"
    other = post(gateway_client, session_id, event="PreToolUse", toolName="Read", toolInput={})
    assert other.json()["outcome"] == "pass"
    assert len(hook_server.bodies("/deny")) == 1
    sent = hook_server.bodies("/deny")[0]
    assert sent["event"] == "PreToolUse" and sent["sessionId"] == session_id
    assert sent["detail"]["toolInput"] == {"command": "rm -rf /"} and sent["schemaVersion"] == 1
    records = read_after(gateway_client, f"/api/sessions/{session_id}/hooks", other)["items"]
    policy = [r for r in records if r["handlerId"] == "policy"]
    assert policy[0]["outcome"] == "deny" and policy[0]["reason"] == "no shell"


@pytest.mark.parametrize(
    "gateway_client",
    [
        {
            "PreToolUse": [
                {"id": "first", "type": "http", "url": "$URL/modify"},
                {"id": "second", "type": "http", "url": "$URL/pass"},
            ]
        }
    ],
    indirect=True,
)
def test_modify_chains_into_the_next_handler(
    gateway_client: TestClient, hook_server: HookServer
) -> None:
    hook_server.routes["/modify"] = answer("modify", replacement={"command": "ls -la"})
    hook_server.routes["/pass"] = answer("pass", additionalContext="checked")
    session_id = new_session(gateway_client)
    decision = post(
        gateway_client, session_id, event="PreToolUse", toolName="Bash", toolInput={"command": "ls"}
    ).json()
    assert decision["outcome"] == "modify"
    assert decision["replacement"] == {"command": "ls -la"}
    assert decision["additionalContext"] == "checked"
    assert hook_server.bodies("/pass")[0]["detail"]["toolInput"] == {"command": "ls -la"}


@pytest.mark.parametrize(
    "gateway_client",
    [
        {
            "UserPromptSubmit": [
                {"id": "slow-gate", "type": "http", "url": "$URL/slow", "timeoutMs": 200}
            ],
            "PostToolUse": [{"id": "broken", "type": "http", "url": "$URL/broken"}],
        }
    ],
    indirect=True,
)
def test_failures_follow_the_failure_mode(
    gateway_client: TestClient, hook_server: HookServer
) -> None:
    hook_server.routes["/slow"] = answer("pass")
    hook_server.delays["/slow"] = 1.0
    hook_server.routes["/broken"] = lambda _: (500, {})
    session_id = new_session(gateway_client)
    closed = post(gateway_client, session_id, event="UserPromptSubmit", prompt="hi").json()
    assert closed["outcome"] == "deny" and "slow-gate" in closed["reason"]
    opened = post(gateway_client, session_id, event="PostToolUse", toolName="Bash")
    assert opened.json()["outcome"] == "pass"
    records = read_after(gateway_client, f"/api/sessions/{session_id}/hooks", opened)["items"]
    failures = {r["handlerId"]: r["failure"] for r in records if r["handlerId"]}
    assert failures == {"slow-gate": "timeout", "broken": "status"}


@pytest.mark.parametrize(
    "gateway_client",
    [{"Stop": [{"id": "keep-going", "type": "http", "url": "$URL/continue"}]}],
    indirect=True,
)
def test_stop_continue_is_honoured_three_times_per_turn(
    gateway_client: TestClient, hook_server: HookServer
) -> None:
    hook_server.routes["/continue"] = answer("continue", reason="tests are failing")
    session_id = new_session(gateway_client)
    outcomes = [
        post(gateway_client, session_id, event="Stop", turnId="turn-1").json()["outcome"]
        for _ in range(5)
    ]
    assert outcomes == ["continue", "continue", "continue", "pass", "pass"]
    next_turn = post(gateway_client, session_id, event="Stop", turnId="turn-2").json()
    assert next_turn["outcome"] == "continue"


@pytest.mark.parametrize(
    "gateway_client",
    [{"PreToolUse": [{"id": "see", "type": "http", "url": "$URL/pass"}]}],
    indirect=True,
)
def test_secret_tool_inputs_are_redacted_before_dispatch_and_storage(
    gateway_client: TestClient, hook_server: HookServer
) -> None:
    hook_server.routes["/pass"] = answer("pass")
    session_id = new_session(gateway_client)
    decision = post(
        gateway_client,
        session_id,
        event="PreToolUse",
        toolName="storeSecret",
        toolInput={"value": "hunter2-secret"},
    ).json()
    assert hook_server.bodies("/pass")[0]["detail"]["toolInput"] == "[redacted]"
    stream = gateway_client.get(f"/api/streams/{decision['dispatchId']}").text
    assert "hunter2-secret" not in stream


def test_hook_audit_keeps_the_latest_500_in_order_and_groups_by_turn(
    gateway_client: TestClient,
) -> None:
    session_id = new_session(gateway_client)
    for i in range(520):
        last = post(
            gateway_client,
            session_id,
            event="PostToolUse",
            turnId=f"t{i // 100}",
            toolCallId=f"c{i}",
        )
    items = read_after(gateway_client, f"/api/sessions/{session_id}/hooks", last)["items"]
    assert len(items) == 500
    positions = [r["at"] for r in items]
    assert positions == sorted(positions)
    # The SessionStart and the first 19 tool events fell off; the rest are in order.
    assert items[0]["event"] == "PostToolUse"
    dispatches = [r["dispatchId"] for r in items]
    assert len(set(dispatches)) == 500
    assert items[-1]["turnId"] == "t5"
    turns = gateway_client.get(
        f"/api/sessions/{session_id}/hooks", params={"groupBy": "turn"}
    ).json()["turns"]
    assert [t["turnId"] for t in turns] == ["t0", "t1", "t2", "t3", "t4", "t5"]
    assert len(turns[0]["records"]) == 100 - 20
    assert sum(len(t["records"]) for t in turns) == 500


@pytest.mark.parametrize(
    "gateway_client",
    [
        {
            "SessionEnd": [{"id": "end", "type": "http", "url": "$URL/pass"}],
            "SessionStart": [{"id": "start", "type": "http", "url": "$URL/pass"}],
        }
    ],
    indirect=True,
)
def test_session_create_and_delete_fire_start_and_end(
    gateway_client: TestClient, hook_server: HookServer
) -> None:
    hook_server.routes["/pass"] = answer("pass")
    session_id = new_session(gateway_client)
    post(gateway_client, session_id, event="PostToolUse")
    assert gateway_client.delete(f"/api/sessions/{session_id}").status_code == 204
    assert [b["event"] for b in hook_server.bodies("/pass")] == ["SessionStart", "SessionEnd"]
    assert gateway_client.get(f"/api/sessions/{session_id}/hooks").status_code == 404
    services: Services = gateway_client.app.state.services  # type: ignore[attr-defined]
    left = services.store.query("SELECT id FROM rm_hook_audit WHERE session_id = ?", (session_id,))
    assert left == []
    # Late events for the deleted session are refused and never resurrect its audit.
    assert post(gateway_client, session_id, event="PostToolUse").status_code == 404


def test_retention_prunes_old_records_and_rebuild_agrees(gateway_client: TestClient) -> None:
    services: Services = gateway_client.app.state.services  # type: ignore[attr-defined]
    session_id = new_session(gateway_client)
    post(gateway_client, session_id, event="PostToolUse")
    future = datetime.now(UTC) + timedelta(days=31)
    position = prune_hook_audit(services.app, future, min_interval=timedelta(hours=23))
    assert position is not None
    assert prune_hook_audit(services.app, future, min_interval=timedelta(hours=23)) is None
    items = gateway_client.get(
        f"/api/sessions/{session_id}/hooks", params={"minPosition": position}
    ).json()["items"]
    assert items == []
    fresh = all_projections(prefix="rb_")
    rebuild(services.app, services.store, fresh)
    assert table_digest(services.store, "rm_hook_audit") == table_digest(
        services.store, "rb_hook_audit"
    )
    assert table_digest(services.store, "rm_sessions") == table_digest(
        services.store, "rb_sessions"
    )


def test_bad_input_is_refused(gateway_client: TestClient) -> None:
    session_id = new_session(gateway_client)
    assert (
        post(
            gateway_client, "0" * 8 + "-0000-4000-8000-" + "0" * 12, event="PostToolUse"
        ).status_code
        == 404
    )
    assert post(gateway_client, session_id, event="PostToolUse", colour=1).status_code == 422
    assert post(gateway_client, session_id, event="bad name!").status_code == 422
    unknown = post(gateway_client, session_id, event="PermissionRequest", detail={"x": 1})
    assert unknown.status_code == 200 and unknown.json()["outcome"] == "pass"


def test_recording_failure_never_changes_the_decision(
    gateway_client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    services: Services = gateway_client.app.state.services  # type: ignore[attr-defined]
    session_id = new_session(gateway_client)

    def broken_save(*_: Any) -> Any:
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(services.app.events, "put", broken_save)  # under every save path
    response = post(gateway_client, session_id, event="PostToolUse")
    assert response.status_code == 200
    assert response.json()["outcome"] == "pass"
    assert response.headers["x-tachograph-recorded"] == "false"


@pytest.mark.parametrize(
    "gateway_client",
    [
        {
            "UserPromptSubmit": [
                {"id": "one", "type": "http", "url": "$URL/one", "secretEnv": "HOOK_SECRET"},
                {"id": "two", "type": "http", "url": "$URL/two"},
                {"id": "three", "type": "http", "url": "$URL/three"},
            ]
        }
    ],
    indirect=True,
)
def test_three_handlers_chain_in_order_and_requests_are_signed(
    gateway_client: TestClient, hook_server: HookServer
) -> None:
    import hashlib
    import hmac

    hook_server.routes["/one"] = lambda b: (
        200,
        {"schemaVersion": 1, "outcome": "modify", "replacement": b["detail"]["prompt"] + " +1"},
    )
    hook_server.routes["/two"] = lambda b: (
        200,
        {"schemaVersion": 1, "outcome": "modify", "replacement": b["detail"]["prompt"] + " +2"},
    )
    hook_server.routes["/three"] = answer("pass")
    session_id = new_session(gateway_client)
    decision = post(gateway_client, session_id, event="UserPromptSubmit", prompt="go").json()
    assert decision == {
        "outcome": "modify",
        "replacement": "go +1 +2",
        "dispatchId": decision["dispatchId"],
    }
    assert [p for p, _, _ in hook_server.requests] == ["/one", "/two", "/three"]
    assert hook_server.bodies("/three")[0]["detail"]["prompt"] == "go +1 +2"
    _, _, headers = hook_server.requests[0]
    lowered = {k.lower(): v for k, v in headers.items()}
    timestamp = lowered["x-tachograph-timestamp"]
    raw = json.dumps(hook_server.bodies("/one")[0], separators=(",", ":"), ensure_ascii=False)
    expected = hmac.new(b"s3cret-value", f"{timestamp}.{raw}".encode(), hashlib.sha256)
    assert lowered["x-tachograph-signature"] == "sha256=" + expected.hexdigest()
    assert "x-tachograph-signature" not in {k.lower() for k in hook_server.requests[1][2]}
    assert not {"authorization", "cookie", "x-tachograph-key"} & set(lowered)


@pytest.mark.parametrize(
    "gateway_client",
    [{"PreToolUse": [{"id": "bad", "type": "http", "url": "$URL/bad"}]}],
    indirect=True,
)
@pytest.mark.parametrize(
    ("answer_body", "failure"),
    [
        ({"schemaVersion": 1, "outcome": "continue"}, "disallowed_outcome"),
        ({"schemaVersion": 1, "outcome": "pass", "extra": 1}, "malformed"),
        ("not an object", "malformed"),
        ({"schemaVersion": 1, "outcome": "pass", "reason": "r" * 3000}, "over_cap"),
    ],
)
def test_bad_handler_answers_fail_closed_for_gates(
    gateway_client: TestClient, hook_server: HookServer, answer_body: Any, failure: str
) -> None:
    hook_server.routes["/bad"] = lambda _: (200, answer_body)
    session_id = new_session(gateway_client)
    sent = post(gateway_client, session_id, event="PreToolUse", toolName="Bash", toolInput={})
    assert sent.json()["outcome"] == "deny" and '"bad"' in sent.json()["reason"]
    records = read_after(gateway_client, f"/api/sessions/{session_id}/hooks", sent)["items"]
    assert [(r["handlerId"], r["failure"]) for r in records if r["handlerId"]] == [("bad", failure)]


def test_a_call_decided_on_the_event_loop_answers_exactly_as_one_with_blocking_steps(
    gateway_client: TestClient,
) -> None:
    """One entry, two ways through it: an event no handler matches, for a session this
    process knows, is decided and queued on the group commit without leaving the event
    loop; a session it must look up first takes a worker thread for that step. The
    answer is the same whichever way it went."""
    session_id = new_session(gateway_client)
    url = f"/api/sessions/{session_id}/events"
    body = {"event": "PostToolUse", "toolName": "Bash", "toolInput": {"command": "ls"}}
    services: Services = gateway_client.app.state.services  # type: ignore[attr-defined]
    offloaded = watch_offloads(services.ingest)
    before = _ingest_count(gateway_client)
    on_loop = gateway_client.post(url, json=body)
    assert offloaded == []
    services.ingest.known.forget(UUID(session_id))
    in_pool = gateway_client.post(url, json=body)
    assert len(offloaded) == 1  # the session's lookup
    assert on_loop.status_code == in_pool.status_code == 200
    loop_body, pool_body = on_loop.json(), in_pool.json()
    assert loop_body.pop("dispatchId") != pool_body.pop("dispatchId")  # two dispatches
    assert loop_body == pool_body and loop_body["outcome"] == "pass"
    assert set(on_loop.headers) == set(in_pool.headers)
    assert int(in_pool.headers["x-tachograph-position"]) == (
        int(on_loop.headers["x-tachograph-position"]) + 1
    )
    assert _ingest_count(gateway_client) == before + 2  # both counted under the template


def _ingest_count(client: TestClient) -> float:
    label = 'method="POST",route="/api/sessions/{session_id}/events",status="200"'
    for line in client.get("/metrics").text.splitlines():
        if line.startswith("tachograph_http_requests_total{") and label in line:
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def test_a_retried_event_is_appended_once_and_answered_from_the_log(
    gateway_client: TestClient,
) -> None:
    session_id = new_session(gateway_client)
    services: Services = gateway_client.app.state.services  # type: ignore[attr-defined]
    first = post(gateway_client, session_id, event="PostToolUse", eventId="retry-1")
    assert services.committer is not None
    attempts: list[object] = []
    original = services.committer.enqueue

    def counted(*args: Any, **kwargs: Any) -> Any:
        attempts.append(args)
        return original(*args, **kwargs)

    services.committer.enqueue = counted  # type: ignore[method-assign]
    again = post(gateway_client, session_id, event="PostToolUse", eventId="retry-1")
    assert again.status_code == 200
    assert again.json() == first.json()  # the stored decision, same dispatch
    assert len(attempts) == 1  # the duplicate met the group commit once, not again in the route
    events = gateway_client.get("/api/events", params={"type": "HookDispatch.Created"}).json()
    assert [e["aggregateId"] for e in events["events"]].count(first.json()["dispatchId"]) == 1


def test_the_memory_of_live_sessions_is_bounded_and_forgetting_costs_nothing(
    gateway_client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    services: Services = gateway_client.app.state.services  # type: ignore[attr-defined]
    monkeypatch.setattr(services.ingest.known, "kept", 3)
    sessions = [
        gateway_client.post("/api/sessions", json={"workspaceId": "default"}).json()["id"]
        for _ in range(5)
    ]
    for session in sessions:
        sent = gateway_client.post(f"/api/sessions/{session}/events", json={"event": "Stop"})
        assert sent.status_code == 200, sent.text
    known = [UUID(s) in services.ingest.known for s in sessions]
    assert known == [False, False, True, True, True]  # the oldest went first
    # A forgotten session is looked up again and takes its events as before.
    again = gateway_client.post(f"/api/sessions/{sessions[0]}/events", json={"event": "Stop"})
    assert again.status_code == 200
    assert UUID(sessions[0]) in services.ingest.known
    assert sum(UUID(s) in services.ingest.known for s in sessions) == 3
