"""GET /api/sessions/{id}/timeline: turns with their prompt, paired tool calls, subagents,
Stop and failure, from real Claude Code payloads and the generic route (both stores)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from infra.settings import Settings
from projections.timeline import CALL_CAP
from tests.hook_server import HookServer, answer
from tests.test_agent_adapters_api import claude_session
from tests.test_hook_gateway_api import hooks_settings

CAPTURED = Path(__file__).resolve().parent / "fixtures" / "claude-code-2.1.328"


def scenario(name: str) -> list[dict[str, Any]]:
    return [json.loads(p.read_text()) for p in sorted((CAPTURED / name).glob("[0-9]*.json"))]


LAST_POSITION: dict[int, str] = {}


def posted(client: TestClient, response: Any) -> None:
    """Remember the position of the latest write, so the next read waits for it."""
    assert response.status_code == 200, response.text
    LAST_POSITION[id(client)] = response.headers["x-tachograph-position"]


def replay(client: TestClient, payloads: list[dict[str, Any]]) -> str:
    for payload in payloads:
        posted(client, client.post("/hooks/claude", json=payload))
    return claude_session(payloads[0])


def timeline(client: TestClient, session_id: str, **params: Any) -> dict[str, Any]:
    params.setdefault("minPosition", LAST_POSITION.get(id(client), "0"))
    response = client.get(f"/api/sessions/{session_id}/timeline", params=params)
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


@pytest.fixture
def hook_server() -> Iterator[HookServer]:
    server = HookServer()
    yield server
    server.close()


def test_a_real_session_shows_its_commands_files_and_summary(client: TestClient) -> None:
    payloads = scenario("basic")
    session_id = replay(client, payloads)
    body = timeline(client, session_id)
    assert body["sortedBy"] == "recordedAt" and body["next"] is None
    (turn,) = body["items"]
    assert turn["turnId"] == payloads[1]["prompt_id"]
    assert turn["prompt"]["text"] == "Run a shell command, then write hello.txt."
    bash, write = turn["calls"]
    assert (bash["tool"], bash["summary"]) == ("Bash", "echo hello-from-claude-shell; uname -s")
    assert (bash["status"], bash["durationMs"], bash["decision"]) == ("ok", 33, "pass")
    assert bash["bytes"] == len(
        json.dumps(payloads[3]["tool_response"], separators=(",", ":")).encode()
    )
    assert (write["tool"], write["summary"]) == ("Write", "<WORK>/proj/hello.txt")
    assert bash["position"] < write["position"]
    assert turn["stop"]["summary"] == "All done: ran a shell command and wrote hello.txt."
    assert (turn["toolCalls"], turn["denials"], turn["failure"]) == (2, 0, None)


def test_a_failed_tool_shows_its_error(client: TestClient) -> None:
    session_id = replay(client, scenario("fail_tool"))
    (call,) = timeline(client, session_id)["items"][0]["calls"]
    assert call["status"] == "error"
    assert call["error"] == "Exit code 3\nabout-to-fail"
    assert call["summary"] == "echo about-to-fail >&2; exit 3"


@pytest.mark.parametrize("store_kind", ["sqlite", "postgres"], indirect=True)
def test_denials_and_rewrites_show_with_their_handler(
    settings: Settings, hook_server: HookServer
) -> None:
    hooks = {"PreToolUse": [{"id": "guard", "type": "http", "url": "$URL/pre"}]}
    with TestClient(create_app(hooks_settings(settings, hook_server, hooks))) as client:
        hook_server.routes["/pre"] = answer("deny", reason="no markers")
        denied = scenario("deny_json")
        session_id = replay(client, denied[:4])
        hook_server.routes["/pre"] = answer(
            "modify", replacement={"command": "echo REWRITTEN > rewritten.txt"}
        )
        modified = scenario("modify")
        modify_session = replay(client, modified[:5])
        (turn,) = timeline(client, session_id)["items"]
        (call,) = turn["calls"]
        assert (call["decision"], call["handlerId"], call["reason"]) == (
            "deny",
            "guard",
            "no markers",
        )
        assert call["status"] == "denied" and turn["denials"] == 1
        (rewritten,) = timeline(client, modify_session)["items"][0]["calls"]
    assert rewritten["decision"] == "modify" and rewritten["status"] == "ok"
    assert rewritten["summary"] == "echo REWRITTEN > rewritten.txt"
    assert rewritten["rewrittenInput"] == {"command": "echo REWRITTEN > rewritten.txt"}
    assert rewritten["originalInput"] == modified[2]["tool_input"]


def event(session_id: str, client: TestClient, **body: Any) -> None:
    posted(client, client.post(f"/api/sessions/{session_id}/events", json=body))


def new_session(client: TestClient) -> str:
    return str(client.post("/api/sessions", json={"workspaceId": "default"}).json()["id"])


def test_pre_and_post_pair_in_either_order_or_alone(client: TestClient) -> None:
    sid = new_session(client)
    event(sid, client, event="UserPromptSubmit", turnId="t1", prompt="go")
    tool = {"toolName": "Bash", "turnId": "t1"}
    event(
        sid, client, event="PostToolUse", toolCallId="late-pre", toolInput={"command": "a"}, **tool
    )
    event(
        sid, client, event="PreToolUse", toolCallId="late-pre", toolInput={"command": "a"}, **tool
    )
    event(sid, client, event="PreToolUse", toolCallId="no-post", toolInput={"command": "b"}, **tool)
    event(sid, client, event="PostToolUse", toolCallId="no-pre", toolInput={"command": "c"}, **tool)
    calls = {c["toolCallId"]: c for c in timeline(client, sid)["items"][0]["calls"]}
    assert len(calls) == 3
    assert (calls["late-pre"]["status"], calls["late-pre"]["decision"]) == ("ok", "pass")
    assert (calls["no-post"]["status"], calls["no-post"]["decision"]) == ("no_result", "pass")
    assert (calls["no-pre"]["status"], calls["no-pre"]["decision"]) == ("ok", None)
    assert [c["summary"] for c in timeline(client, sid)["items"][0]["calls"]] == ["a", "b", "c"]


def test_subagent_calls_nest_under_their_subagent(client: TestClient) -> None:
    sid = new_session(client)
    event(sid, client, event="UserPromptSubmit", prompt="review it")  # no turn ids at all
    event(sid, client, event="SubagentStart", subagentId="a1", agentType="reviewer", prompt="look")
    event(
        sid,
        client,
        event="PreToolUse",
        toolName="Read",
        toolCallId="r1",
        subagentId="a1",
        toolInput={"file_path": "/repo/x.py"},
    )
    event(sid, client, event="SubagentStop", subagentId="a1", lastAssistantMessage="looks fine")
    event(sid, client, event="Stop", lastAssistantMessage="reviewed")
    event(sid, client, event="StopFailure", error="rate_limit")
    (turn,) = timeline(client, sid)["items"]
    assert turn["turnId"] is None and turn["calls"] == []
    (agent,) = turn["subagents"]
    assert (agent["subagentId"], agent["agentType"], agent["prompt"]) == ("a1", "reviewer", "look")
    assert agent["summary"] == "looks fine"
    assert [c["summary"] for c in agent["calls"]] == ["/repo/x.py"]
    assert turn["toolCalls"] == 1 and turn["stop"]["summary"] == "reviewed"
    assert turn["failure"]["error"] == "rate_limit"


def test_turns_page_newest_first(client: TestClient) -> None:
    sid = new_session(client)
    for n in range(3):
        event(sid, client, event="UserPromptSubmit", turnId=f"t{n}", prompt=f"prompt {n}")
        event(sid, client, event="Stop", turnId=f"t{n}", lastAssistantMessage=f"done {n}")
    first = timeline(client, sid, limit=2)
    assert [t["turnId"] for t in first["items"]] == ["t2", "t1"]
    second = timeline(client, sid, limit=2, before=first["next"])
    assert [t["turnId"] for t in second["items"]] == ["t0"] and second["next"] is None
    log = timeline(client, sid, limit=2, source="log")
    assert log["items"] == first["items"] and log["next"] == first["next"]
    assert client.get(f"/api/sessions/{sid}/timeline", params={"limit": 0}).status_code == 422
    client.delete(f"/api/sessions/{sid}")
    assert client.get(f"/api/sessions/{sid}/timeline").status_code == 404


def test_the_read_model_keeps_the_latest_2000_calls_and_the_log_keeps_all(
    client: TestClient,
) -> None:
    sid = new_session(client)
    event(sid, client, event="UserPromptSubmit", turnId="t", prompt="many")
    for n in range(CALL_CAP + 5):
        event(
            sid,
            client,
            event="PreToolUse",
            turnId="t",
            toolName="Bash",
            toolCallId=f"c{n}",
            toolInput={"command": f"echo {n}"},
        )
    (kept,) = timeline(client, sid)["items"]
    assert len(kept["calls"]) == CALL_CAP
    assert kept["calls"][0]["summary"] == "echo 5" and kept["calls"][-1]["summary"] == "echo 2004"
    assert kept["prompt"]["text"] == "many"
    (whole,) = timeline(client, sid, source="log")["items"]
    assert len(whole["calls"]) == CALL_CAP + 5 and whole["calls"][0]["summary"] == "echo 0"


def test_recorded_at_follows_the_log_under_concurrent_writers(client: TestClient) -> None:
    sid = new_session(client)
    event(sid, client, event="UserPromptSubmit", turnId="t", prompt="race")

    def writer(w: int) -> None:
        for n in range(130):
            response = client.post(
                f"/api/sessions/{sid}/events",
                json={
                    "event": "PreToolUse",
                    "turnId": "t",
                    "toolName": "Bash",
                    "toolCallId": f"w{w}-{n}",
                    "toolInput": {"command": f"echo {w} {n}"},
                },
            )
            assert response.status_code == 200, response.text
            posted(client, response)

    with ThreadPoolExecutor(4) as pool:
        list(pool.map(writer, range(4)))
    (turn,) = timeline(client, sid, minPosition=max_position(client))["items"]
    calls = turn["calls"]
    assert len(calls) == 4 * 130
    assert [c["position"] for c in calls] == sorted(c["position"] for c in calls)
    recorded = [c["recordedAt"] for c in calls]
    assert recorded == sorted(recorded)  # chronological is log order
    assert all(c["recordedAt"] >= c["at"] >= c["receivedAt"] for c in calls)


def max_position(client: TestClient) -> str:
    services = client.app.state.services  # type: ignore[attr-defined]
    return str(services.app.recorder.max_notification_id())
