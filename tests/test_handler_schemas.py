"""docs/schemas/ holds what the server really sends and accepts, on both stores.

The requests a managed handler receives (from the generic route and from real Claude Code
hook payloads) validate against handler-request.schema.json; answers the server takes
validate against handler-answer.schema.json, and answers it refuses as a handler failure
are refused by the schema too. The same for the generic route's body and its decision.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from jsonschema import Draft202012Validator

from api.app import create_app
from domain.lifecycle_events import EVENT_OUTCOMES
from infra.settings import Settings
from tests.hook_server import HookServer

ROOT = Path(__file__).resolve().parents[1]
SCHEMAS = ROOT / "docs" / "schemas"


# Real Claude Code hook payloads, relayed through /hooks/claude.
def _payload(path: Path) -> dict[str, Any]:
    """A fixture is the payload itself, or a capture holding it under `payload`."""
    document: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    payload: dict[str, Any] = document.get("payload", document)
    return payload


CLAUDE_FIXTURES_PAYLOADS: list[dict[str, Any]] = [
    _payload(path) for path in sorted((ROOT / "tests" / "fixtures" / "claude-code").glob("*.json"))
]


def validator(name: str, definition: str | None = None) -> Draft202012Validator:
    schema = json.loads((SCHEMAS / name).read_text(encoding="utf-8"))
    Draft202012Validator.check_schema(schema)
    if definition is not None:
        schema = {**schema, "$ref": f"#/$defs/{definition}"}
    return Draft202012Validator(schema, format_checker=Draft202012Validator.FORMAT_CHECKER)


def problems(validator: Draft202012Validator, instance: Any) -> list[str]:
    return [error.message for error in validator.iter_errors(instance)]


class Scripted:
    """Answers each handler request with the answer set last."""

    def __init__(self) -> None:
        self.status = 200
        self.answer: Any = {"schemaVersion": 1, "outcome": "pass"}

    def __call__(self, _: dict[str, Any]) -> tuple[int, Any]:
        return self.status, self.answer


@pytest.fixture
def handler() -> Iterator[tuple[HookServer, Scripted]]:
    server = HookServer()
    scripted = Scripted()
    for event in EVENT_OUTCOMES:
        server.routes[f"/{event}"] = scripted
    yield server, scripted
    server.close()


@pytest.fixture
def client(settings: Settings, handler: tuple[HookServer, Scripted]) -> Iterator[TestClient]:
    server, _ = handler
    hooks = {
        event: [{"id": f"h-{event}", "type": "http", "url": f"{server.url}/{event}"}]
        for event in EVENT_OUTCOMES
    }
    env = {
        "TACHOGRAPH_HOOKS": json.dumps({"version": 1, "hooks": hooks}),
        "TACHOGRAPH_HOOK_ALLOW_INSECURE_LOOPBACK": "1",
    }
    parsed = Settings.from_env(env)
    app = create_app(settings.with_(hooks=parsed.hooks, hook_allow_insecure_loopback=True))
    with TestClient(app, raise_server_exceptions=False) as test_client:
        yield test_client


def new_session(client: TestClient) -> str:
    return str(client.post("/api/sessions", json={"workspaceId": "default"}).json()["id"])


# Bodies of POST /api/sessions/{id}/events that together use every field of the body.
EVENTS: list[dict[str, Any]] = [
    {"event": "SessionStart", "agent": "claude-code", "agentSessionId": "a-1", "model": "m"},
    {"event": "UserPromptSubmit", "turnId": "t1", "prompt": "fix it", "eventId": "e-1"},
    {
        "event": "PreToolUse",
        "turnId": "t1",
        "toolName": "Bash",
        "toolCallId": "c1",
        "toolInput": {"command": "ls"},
        "cwd": "/repo",
        "permissionMode": "default",
        "detail": {"transcriptPath": "/tmp/t.jsonl"},
    },
    {
        "event": "PostToolUse",
        "turnId": "t1",
        "toolName": "Bash",
        "toolCallId": "c1",
        "toolResponse": {"stdout": "a\n"},
        "durationMs": 12,
    },
    {
        "event": "PostToolUseFailure",
        "turnId": "t1",
        "toolName": "Bash",
        "toolCallId": "c2",
        "error": "exit 1",
        "isInterrupt": False,
    },
    {"event": "SubagentStart", "turnId": "t1", "subagentId": "s1", "agentType": "Explore"},
    {"event": "SubagentStop", "turnId": "t1", "subagentId": "s1"},
    {"event": "Stop", "turnId": "t1", "lastAssistantMessage": "done"},
    {"event": "Notification", "detail": {"message": "waiting"}},
    {"event": "MyOwnEvent", "toolInput": None},
    {"event": "SessionEnd"},
]


def test_the_requests_a_handler_receives_and_the_decisions_sent_follow_the_schemas(
    client: TestClient, handler: tuple[HookServer, Scripted]
) -> None:
    server, _ = handler
    event_schema = validator("lifecycle-event.schema.json")
    decision_schema = validator("lifecycle-decision.schema.json")
    session_id = new_session(client)
    for body in EVENTS:
        assert problems(event_schema, body) == []
        response = client.post(f"/api/sessions/{session_id}/events", json=body)
        assert response.status_code == 200, response.text
        assert problems(decision_schema, response.json()) == []
    for body in CLAUDE_FIXTURES_PAYLOADS:
        sent = client.post(
            "/hooks/claude", json=body, headers={"x-tachograph-session-id": session_id}
        )
        assert sent.status_code == 200, sent.text
    request_schema = validator("handler-request.schema.json")
    received = [body for _, body, _ in server.requests]
    known = {e["event"] for e in EVENTS if e["event"] in EVENT_OUTCOMES}
    assert {body["event"] for body in received} >= known
    assert len(received) >= len(known) + len(CLAUDE_FIXTURES_PAYLOADS)
    for body in received:
        assert problems(request_schema, body) == [], body
    # Every field the schema names is one the server sent at least once.
    named = set(json.loads((SCHEMAS / "handler-request.schema.json").read_text())["properties"])
    assert named == set().union(*(set(body) for body in received))
    detail_named = set(
        json.loads((SCHEMAS / "handler-request.schema.json").read_text())["$defs"]["detail"][
            "properties"
        ]
    )
    assert detail_named <= set().union(*(set(body["detail"]) for body in received))


def hook_failure(client: TestClient, session_id: str, body: dict[str, Any]) -> str | None:
    """The failure class of the handler run the event caused (None: the answer was taken)."""
    response = client.post(f"/api/sessions/{session_id}/events", json=body)
    assert response.status_code == 200, response.text
    records = client.get(
        f"/api/sessions/{session_id}/hooks",
        params={"minPosition": response.headers["x-tachograph-position"]},
    ).json()["items"]
    run = [r for r in records if r["dispatchId"] == response.json()["dispatchId"]]
    assert len(run) == 1
    failure: str | None = run[0]["failure"]
    return failure


TOOL = {"event": "PreToolUse", "toolName": "Bash", "toolCallId": "c9", "toolInput": {"a": 1}}
PROMPT = {"event": "UserPromptSubmit", "prompt": "hello"}
STOP = {"event": "Stop", "turnId": "t9"}
AFTER = {"event": "PostToolUse", "toolName": "Bash", "toolCallId": "c9"}

VALID_ANSWERS: list[tuple[dict[str, Any], dict[str, Any]]] = [
    (TOOL, {"schemaVersion": 1, "outcome": "pass"}),
    (TOOL, {"schemaVersion": 1, "outcome": "deny", "reason": "no"}),
    (TOOL, {"schemaVersion": 1, "outcome": "modify", "replacement": {"command": "ls"}}),
    (PROMPT, {"schemaVersion": 1, "outcome": "modify", "replacement": "hello there"}),
    (PROMPT, {"schemaVersion": 1, "outcome": "pass", "additionalContext": "x" * 16384}),
    (STOP, {"schemaVersion": 1, "outcome": "continue", "reason": "tests fail"}),
    (AFTER, {"schemaVersion": 1, "outcome": "pass", "reason": "r" * 2048}),
]

INVALID_ANSWERS: list[tuple[dict[str, Any], Any]] = [
    (TOOL, {"schemaVersion": 1, "outcome": "pass", "extra": True}),
    (TOOL, {"outcome": "pass"}),
    (TOOL, {"schemaVersion": 2, "outcome": "pass"}),
    (TOOL, {"schemaVersion": True, "outcome": "pass"}),
    (TOOL, {"schemaVersion": 1, "outcome": "maybe"}),
    (TOOL, {"schemaVersion": 1, "outcome": 1}),
    (TOOL, {"schemaVersion": 1}),
    (TOOL, {"schemaVersion": 1, "outcome": "deny", "reason": 7}),
    (TOOL, {"schemaVersion": 1, "outcome": "modify"}),
    (TOOL, {"schemaVersion": 1, "outcome": "modify", "replacement": "ls"}),
    (TOOL, {"schemaVersion": 1, "outcome": "pass", "replacement": {"command": "ls"}}),
    (TOOL, {"schemaVersion": 1, "outcome": "continue"}),
    (TOOL, {"schemaVersion": 1, "outcome": "pass", "reason": "r" * 2049}),
    (TOOL, [{"schemaVersion": 1, "outcome": "pass"}]),
    (PROMPT, {"schemaVersion": 1, "outcome": "modify", "replacement": {"prompt": "x"}}),
    (PROMPT, {"schemaVersion": 1, "outcome": "ask"}),
    (PROMPT, {"schemaVersion": 1, "outcome": "pass", "additionalContext": "x" * 16385}),
    (STOP, {"schemaVersion": 1, "outcome": "deny"}),
    (AFTER, {"schemaVersion": 1, "outcome": "deny", "reason": "too late"}),
]


def test_answers_the_server_takes_the_schema_takes_and_those_it_refuses_it_refuses(
    client: TestClient, handler: tuple[HookServer, Scripted]
) -> None:
    _, scripted = handler
    session_id = new_session(client)
    for event, answer in VALID_ANSWERS:
        schema = validator("handler-answer.schema.json", event["event"])
        assert problems(schema, answer) == [], answer
        scripted.answer = answer
        assert hook_failure(client, session_id, event) is None, answer
    for event, answer in INVALID_ANSWERS:
        schema = validator("handler-answer.schema.json", event["event"])
        assert problems(schema, answer) != [], answer
        scripted.answer = answer
        assert hook_failure(client, session_id, event) is not None, answer


def test_the_answer_schema_allows_each_event_the_outcomes_the_server_allows() -> None:
    schema = json.loads((SCHEMAS / "handler-answer.schema.json").read_text(encoding="utf-8"))
    allowed = {
        event: set(schema["$defs"][event]["properties"]["outcome"]["enum"])
        for event in EVENT_OUTCOMES
    }
    assert allowed == {event: set(outcomes) for event, outcomes in EVENT_OUTCOMES.items()}
    assert schema["$defs"]["otherEvent"]["properties"]["outcome"]["enum"] == ["pass"]


INVALID_EVENTS: list[Any] = [
    {},
    {"event": "1bad"},
    {"event": "Stop", "unknown": 1},
    {"event": "Stop", "eventId": ""},
    {"event": "Stop", "turnId": "t" * 257},
    {"event": "Stop", "durationMs": -1},
    {"event": "Stop", "durationMs": 1.5},
    {"event": "Stop", "isInterrupt": "yes"},
    {"event": "Stop", "prompt": 3},
    {"event": "Stop", "detail": []},
    ["Stop"],
]


def test_event_bodies_the_route_refuses_the_schema_refuses(client: TestClient) -> None:
    schema = validator("lifecycle-event.schema.json")
    session_id = new_session(client)
    for body in INVALID_EVENTS:
        assert problems(schema, body) != [], body
        response = client.post(f"/api/sessions/{session_id}/events", json=body)
        assert response.status_code == 422, (body, response.text)


def test_the_event_schema_names_every_field_the_route_reads() -> None:
    from api.schemas import LifecycleEventBody

    schema = json.loads((SCHEMAS / "lifecycle-event.schema.json").read_text(encoding="utf-8"))
    assert set(schema["properties"]) == set(LifecycleEventBody.model_fields)
    assert set(schema["properties"]) == set().union(*(set(body) for body in EVENTS))
