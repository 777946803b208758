"""What each dispatch records of the call itself: bounded, redacted facts (both stores).

Every real Claude Code payload is checked field by field against the log
(`GET /api/events`), as are Coder's events, redaction, the bounds, a modify and
TACHOGRAPH_RECORD=metadata.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from infra.settings import Settings
from tests.hook_server import HookServer, answer
from tests.test_agent_adapters_api import claude_session, coder_request, load_fixture
from tests.test_hook_gateway_api import hooks_settings

FIXTURES = Path(__file__).resolve().parent / "fixtures"
PUBLIC = sorted((FIXTURES / "claude-code").glob("*.json"))
CAPTURED = sorted((FIXTURES / "claude-code-2.1.328").glob("*/[0-9]*.json"))
CODER_SECRET = "c" * 40
CODER_AUDIENCE = "https://tachograph.test/hooks/coder"


def payload_of(path: Path) -> dict[str, Any]:
    document = json.loads(path.read_text())
    payload: dict[str, Any] = document.get("payload", document)
    return payload


def compact(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def dispatches(client: TestClient, session_id: str | None = None) -> list[dict[str, Any]]:
    events = client.get(
        "/api/events", params={"type": "HookDispatch.Created", "limit": 500}
    ).json()["events"]
    data = [e["data"] for e in events]
    return [d for d in data if session_id is None or d["session_id"] == session_id]


def recorded(client: TestClient, payload: dict[str, Any]) -> dict[str, Any]:
    """The facts of the dispatch that recorded `payload` (the latest of its session)."""
    response = client.post("/hooks/claude", json=payload)
    assert response.status_code == 200, response.text
    (latest,) = dispatches(client, claude_session(payload))[-1:]
    assert latest["event_name"] == payload["hook_event_name"]
    facts: dict[str, Any] = latest["facts"]
    return facts


@pytest.fixture
def client(settings: Settings) -> Iterator[TestClient]:
    configured = settings.with_(coder_hook_secret=CODER_SECRET, coder_hook_url=CODER_AUDIENCE)
    with TestClient(create_app(configured), raise_server_exceptions=False) as test_client:
        yield test_client


def expected_facts(payload: dict[str, Any]) -> dict[str, Any]:
    """What the log must hold of a fixture: it has no secrets and no oversized field."""
    event = payload["hook_event_name"]
    expected: dict[str, Any] = {}
    tool_input = payload.get("tool_input")
    if isinstance(tool_input, dict):
        expected["input"] = tool_input
        summary_key = {
            "Bash": "command",
            "Write": "file_path",
            "Edit": "file_path",
            "Read": "file_path",
        }.get(payload.get("tool_name", ""))
        if summary_key:
            expected["input_summary"] = tool_input[summary_key]
    if event in ("PostToolUse", "PostToolUseFailure"):
        expected["is_error"] = event == "PostToolUseFailure"
        if "error" in payload:
            expected["error"] = payload["error"]
        if "tool_response" in payload:
            raw = compact(payload["tool_response"]).encode()
            assert len(raw) <= 2048  # the fixtures' responses fit the head whole
            expected["response"] = {
                "bytes": len(raw),
                "sha256": hashlib.sha256(raw).hexdigest(),
                "head": raw.decode(),
            }
    elif "error" in payload:
        expected["error"] = payload["error"]
    for key in ("duration_ms", "is_interrupt", "model", "agent_type", "permission_mode", "cwd"):
        if key in payload:
            expected[key] = payload[key]
    if event == "UserPromptSubmit":
        expected["prompt"] = payload["prompt"]
    if event in ("Stop", "SubagentStop") and "last_assistant_message" in payload:
        expected["last_assistant_message"] = payload["last_assistant_message"]
    return expected


@pytest.mark.parametrize("path", PUBLIC + CAPTURED, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_real_payload_is_recorded_field_by_field(client: TestClient, path: Path) -> None:
    payload = payload_of(path)
    assert recorded(client, payload) == expected_facts(payload)


def test_the_fixtures_cover_what_the_facts_take_from_them() -> None:
    keys = {key for path in PUBLIC + CAPTURED for key in payload_of(path)}
    events = {payload_of(path)["hook_event_name"] for path in PUBLIC + CAPTURED}
    assert {"tool_input", "tool_response", "duration_ms", "error", "is_interrupt"} <= keys
    assert {"cwd", "permission_mode", "model", "prompt", "last_assistant_message"} <= keys
    assert {"PostToolUseFailure", "StopFailure", "UserPromptSubmit", "Stop"} <= events


def test_secrets_never_reach_the_log(client: TestClient) -> None:
    payload = load_fixture("PreToolUse-1.json") | {"tool_name": "Bash"}
    key = "sk-ant-" + "A1b2C3d4" * 4
    payload["tool_input"] = {
        "command": f"curl -H 'Authorization: Bearer {key}' https://example.test",
        "env": {"API_TOKEN": "plain-words-but-named-as-a-token"},
    }
    facts = recorded(client, payload)
    text = json.dumps(facts)
    assert key not in text and "plain-words-but-named-as-a-token" not in text
    assert facts["input_summary"].startswith("curl -H 'Authorization: Bearer [redacted]'")
    assert facts["input"]["env"] == {"API_TOKEN": "[redacted]"}


def test_a_redacted_tool_keeps_neither_input_nor_response(client: TestClient) -> None:
    pre = load_fixture("PreToolUse-1.json") | {
        "tool_name": "storeSecret",
        "tool_input": {"name": "db", "value": "correct horse battery staple"},
    }
    facts = recorded(client, pre)
    assert facts["input"] == "[redacted]" and "input_summary" not in facts
    post = load_fixture("PostToolUse-1.json") | {
        "tool_name": "storeSecret",
        "tool_input": {"value": "correct horse battery staple"},
        "tool_response": "stored correct horse battery staple",
    }
    facts = recorded(client, post)
    assert "correct horse" not in json.dumps(facts)
    assert facts["response"] == {"bytes": len(post["tool_response"]), "head": "[redacted]"}


def test_a_large_response_keeps_its_size_digest_and_head_only(client: TestClient) -> None:
    payload = load_fixture("PostToolUse-1.json")
    output = "é" + "x" * (5 * 1024 * 1024)
    payload["tool_response"] = {"stdout": output, "stderr": ""}
    facts = recorded(client, payload)
    raw = compact(payload["tool_response"]).encode()
    response = facts["response"]
    assert response["bytes"] == len(raw)
    assert response["sha256"] == hashlib.sha256(raw).hexdigest()
    assert len(response["head"].encode()) <= 2048
    assert raw.decode().startswith(response["head"])
    assert "response" in facts["truncated"]
    assert len(compact(facts).encode()) <= 32 * 1024


def test_long_inputs_and_prompts_are_cut_at_8_kib_and_marked(client: TestClient) -> None:
    pre = load_fixture("PreToolUse-1.json")
    pre["tool_input"] = {"file_path": "/repo/big.txt", "content": "ü" * 20_000}
    facts = recorded(client, pre)
    assert facts["truncated"] == ["input"]
    assert isinstance(facts["input"], str)  # the input's JSON text, cut
    assert len(facts["input"].encode()) <= 8192
    assert compact(pre["tool_input"]).startswith(facts["input"])
    assert facts["input_summary"] == "/repo/big.txt"
    prompt = load_fixture("UserPromptSubmit-1.json") | {"prompt": "€" * 10_000}
    facts = recorded(client, prompt)
    assert facts["truncated"] == ["prompt"]
    assert prompt["prompt"].startswith(facts["prompt"])
    assert 8192 - 3 <= len(facts["prompt"].encode()) <= 8192  # cut between characters


@pytest.mark.parametrize("store_kind", ["sqlite", "postgres"], indirect=True)
def test_a_modify_records_the_rewritten_input_beside_the_original(
    settings: Settings, hook_server: HookServer
) -> None:
    hook_server.routes["/pre"] = answer(
        "modify", replacement={"command": "echo redacted > leak.txt"}
    )
    hooks = {"PreToolUse": [{"id": "guard", "type": "http", "url": "$URL/pre"}]}
    with TestClient(create_app(hooks_settings(settings, hook_server, hooks))) as client:
        payload = load_fixture("PreToolUse-1.json") | {
            "tool_name": "Bash",
            "tool_input": {"command": "echo secret-value > leak.txt"},
        }
        facts = recorded(client, payload)
    assert facts["input"] == {"command": "echo redacted > leak.txt"}
    assert facts["input_summary"] == "echo redacted > leak.txt"
    assert facts["original_input"] == {"command": "echo secret-value > leak.txt"}


@pytest.fixture
def hook_server() -> Iterator[HookServer]:
    server = HookServer()
    yield server
    server.close()


def test_coder_events_record_their_facts(client: TestClient) -> None:
    pre, headers = coder_request(
        "pre_tool_use",
        {"tool_use_id": "tu-1", "tool_name": "bash", "tool_input": {"command": "git status"}},
        dispatch_id="d-pre",
    )
    assert client.post("/hooks/coder", content=pre, headers=headers).status_code == 200
    failed, headers = coder_request(
        "post_tool_use",
        {"tool_use_id": "tu-1", "tool_name": "bash", "tool_response": "", "tool_error": "exit 1"},
        dispatch_id="d-post",
    )
    assert client.post("/hooks/coder", content=failed, headers=headers).status_code == 200
    prompt, headers = coder_request(
        "user_prompt_submit", {"prompt": "fix the build"}, dispatch_id="d-prompt"
    )
    assert client.post("/hooks/coder", content=prompt, headers=headers).status_code == 200
    by_id = {d["event_id"]: d for d in dispatches(client)}
    assert by_id["d-pre"]["facts"] == {
        "input": {"command": "git status"},
        "input_summary": "git status",
    }
    assert by_id["d-post"]["event_name"] == "PostToolUseFailure"
    assert by_id["d-post"]["facts"] == {
        "is_error": True,
        "error": "exit 1",
        "response": {"bytes": 0, "sha256": hashlib.sha256(b"").hexdigest(), "head": ""},
    }
    assert by_id["d-prompt"]["facts"] == {"prompt": "fix the build"}


@pytest.mark.parametrize(
    ("coder_type", "data", "expected"),
    [
        ("session_start", {}, {}),
        ("pre_compact", {}, {}),
        ("post_compact", {}, {}),
        ("stop", {}, {}),
        (
            "post_tool_use",
            {
                "tool_use_id": "t",
                "tool_name": "bash",
                "tool_input": {"cmd": "ls"},
                "tool_response": "a.txt",
            },
            {
                "input": {"cmd": "ls"},
                "input_summary": "ls",
                "is_error": False,
                "response": {
                    "bytes": 5,
                    "sha256": hashlib.sha256(b"a.txt").hexdigest(),
                    "head": "a.txt",
                },
            },
        ),
    ],
)
def test_every_other_coder_event_type_records_what_it_carries(
    client: TestClient, coder_type: str, data: dict[str, Any], expected: dict[str, Any]
) -> None:
    body, headers = coder_request(coder_type, data, dispatch_id=f"d-{coder_type}")
    assert client.post("/hooks/coder", content=body, headers=headers).status_code == 200
    (dispatch,) = [d for d in dispatches(client) if d["event_id"] == f"d-{coder_type}"]
    assert dispatch["facts"] == expected


def test_the_generic_route_records_the_facts_it_is_given(client: TestClient) -> None:
    session_id = client.post("/api/sessions", json={"workspaceId": "default"}).json()["id"]
    body = {
        "event": "PostToolUse",
        "toolName": "WebFetch",
        "toolCallId": "c-1",
        "toolInput": {"url": "https://example.test/a"},
        "toolResponse": "page text",
        "durationMs": 12,
        "cwd": "/repo",
        "agentType": "reviewer",
        "permissionMode": "plan",
        "isInterrupt": False,
    }
    assert client.post(f"/api/sessions/{session_id}/events", json=body).status_code == 200
    (facts,) = [
        d["facts"] for d in dispatches(client, session_id) if d["event_name"] == "PostToolUse"
    ]
    assert facts["input_summary"] == "https://example.test/a"
    assert facts["response"]["head"] == "page text" and facts["duration_ms"] == 12
    assert (facts["cwd"], facts["agent_type"], facts["permission_mode"]) == (
        "/repo",
        "reviewer",
        "plan",
    )
    refused = client.post(f"/api/sessions/{session_id}/events", json=body | {"durationMs": -1})
    assert refused.status_code == 422 and "durationMs" in refused.text


def test_metadata_mode_records_names_only(settings: Settings) -> None:
    with TestClient(create_app(settings.with_(record="metadata"))) as client:
        payload = load_fixture("PreToolUse-1.json")
        assert client.post("/hooks/claude", json=payload).status_code == 200
        (dispatch,) = dispatches(client, claude_session(payload))
    assert dispatch["facts"] is None
    assert dispatch["tool_name"] == payload["tool_name"]


def test_the_record_mode_is_read_from_the_environment() -> None:
    assert Settings.from_env({}).record == "full"
    assert Settings.from_env({"TACHOGRAPH_RECORD": "Metadata"}).record == "metadata"


def test_an_unknown_record_mode_refuses_start_up() -> None:
    from infra.settings import SettingsError

    with pytest.raises(SettingsError, match="TACHOGRAPH_RECORD"):
        Settings.from_env({"TACHOGRAPH_RECORD": "everything"})
