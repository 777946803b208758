"""Strict JSON at every edge, and a log that always reads (both stores).

NaN, Infinity, lone surrogates and over-deep documents are refused with a 4xx naming
the problem on every route that takes a JSON body, and nothing is recorded. Events an
earlier release stored with such values (written here straight into the store) read
back as valid JSON through every read route, the live stream, export, replay and verify.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NoReturn

import jwt
import pytest
from eventsourcing.persistence import StoredEvent
from fastapi.testclient import TestClient

from api.app import create_app
from bootstrap import Services
from domain.lifecycle import LifecycleEvent
from infra.agent_stream import AgentStream
from infra.log_reader import read_events
from infra.settings import Settings
from ingest.loop import run_sync
from services.live_stream import LiveStream, Reads
from tests.support import env_for
from tests.test_session_export import recomputed_link, stored_bytes

ROOT = Path(__file__).resolve().parents[1]
CODER_SECRET = "c" * 40
CODER_AUDIENCE = "https://tachograph.test/hooks/coder"

# (name, JSON text put where a tool input's value goes, status, what the message names)
POISON: list[tuple[str, bytes, int, str]] = [
    ("NaN", b"NaN", 400, "NaN"),
    ("Infinity", b"Infinity", 400, "Infinity"),
    ("-Infinity", b"-Infinity", 400, "-Infinity"),
    ("lone surrogate", b'"a\\ud800b"', 422, "surrogate"),
    ("lone surrogate key", b'{"\\udc00": 1}', 422, "surrogate"),
    ("100,000 deep", b"[" * 100_000 + b"]" * 100_000, 422, "nested deeper than 64"),
]


def strict(text: str) -> Any:
    """json.loads as a strict parser reads: NaN and Infinity are errors, not numbers."""

    def refuse(name: str) -> NoReturn:
        raise ValueError(f"{name} is not JSON")

    value = json.loads(text, parse_constant=refuse)
    text.encode("utf-8")  # lone surrogates cannot be encoded
    return value


@pytest.fixture
def strict_client(settings: Settings) -> Iterator[TestClient]:
    configured = settings.with_(coder_hook_secret=CODER_SECRET, coder_hook_url=CODER_AUDIENCE)
    with TestClient(create_app(configured), raise_server_exceptions=False) as client:
        yield client


def log_size(client: TestClient) -> int:
    """Events in the log, counted through GET /api/events (which must always answer)."""
    count, after = 0, 0
    while True:
        page = client.get("/api/events", params={"after": after})
        assert page.status_code == 200, page.text
        body = strict(page.text)
        count += len(body["events"])
        if body["next"] is None:
            return count
        after = body["next"]


def session(client: TestClient) -> str:
    return str(client.post("/api/sessions", json={"workspaceId": "default"}).json()["id"])


def refuses_every_poison(
    client: TestClient, send: Any, valid: bytes, expected_ok: int = 200
) -> None:
    """`send(body)` of each poisoned body is a 4xx naming the problem, recording nothing;
    the same body with a plain value is then accepted (so the count could move)."""
    before = log_size(client)
    for name, value, status, says in POISON:
        response = send(valid.replace(b'"@V@"', value))
        assert response.status_code == status, (name, response.status_code, response.text)
        error = strict(response.text)
        assert error["error"] == ("invalid_json" if status == 400 else "validation_error")
        assert says in error["message"], (name, error)
        assert log_size(client) == before, name
    accepted = send(valid.replace(b'"@V@"', b'"plain"'))
    assert accepted.status_code == expected_ok, accepted.text
    assert log_size(client) > before


def post(client: TestClient, path: str, headers: dict[str, str] | None = None) -> Any:
    def send(body: bytes) -> Any:
        return client.post(
            path, content=body, headers={"content-type": "application/json", **(headers or {})}
        )

    return send


def test_the_generic_events_route_refuses_non_json_values(strict_client: TestClient) -> None:
    path = f"/api/sessions/{session(strict_client)}/events"
    valid = b'{"event":"PreToolUse","turnId":"t","toolName":"Bash","toolCallId":"c1",'
    valid += b'"toolInput":{"x":"@V@"}}'
    refuses_every_poison(strict_client, post(strict_client, path), valid)


def test_a_pydantic_route_refuses_non_json_values(strict_client: TestClient) -> None:
    session_id = session(strict_client)

    def send(body: bytes) -> Any:
        return strict_client.put(
            f"/api/sessions/{session_id}",
            content=body,
            headers={"content-type": "application/json"},
        )

    refuses_every_poison(strict_client, send, b'{"revision":0,"messages":[{"x":"@V@"}]}')


def test_claude_codes_hook_route_refuses_non_json_values(strict_client: TestClient) -> None:
    valid = b'{"hook_event_name":"PreToolUse","session_id":"s-strict","tool_name":"Bash",'
    valid += b'"tool_use_id":"c1","tool_input":{"x":"@V@"}}'
    refuses_every_poison(strict_client, post(strict_client, "/hooks/claude"), valid)


def test_the_runtime_hook_routes_refuse_non_json_values(strict_client: TestClient) -> None:
    valid = b'{"session_id":"01a230ac-82fe-7c60-8464-4c18cd466798","turn_id":"t",'
    valid += b'"hook_event_name":"PreToolUse","tool_name":"Bash","tool_use_id":"c1",'
    valid += b'"tool_input":{"x":"@V@"}}'
    refuses_every_poison(strict_client, post(strict_client, "/hooks/codex/PreToolUse"), valid)


def test_coders_signed_webhook_refuses_non_json_values(strict_client: TestClient) -> None:
    def send(body: bytes) -> Any:
        now = int(time.time())
        claims = {
            "aud": CODER_AUDIENCE,
            "sub": "coder:chat:chat-1",
            "jti": "disp-1",
            "type": "pre_tool_use",
            "iat": now,
            "nbf": now - 1,
            "exp": now + 60,
            "body_sha256": hashlib.sha256(body).hexdigest(),
        }
        token = jwt.encode(claims, CODER_SECRET, algorithm="HS256")
        return post(strict_client, "/hooks/coder", {"authorization": f"Bearer {token}"})(body)

    valid = b'{"type":"pre_tool_use","meta":{"dispatch_id":"disp-1","schema_version":1,'
    valid += b'"chat_id":"chat-1","owner_id":"owner"},"data":{"tool_use_id":"tu",'
    valid += b'"tool_name":"bash","tool_input":{"x":"@V@"}}}'
    refuses_every_poison(strict_client, send, valid)


def test_every_body_route_decodes_strictly(strict_client: TestClient) -> None:
    """NaN is refused by the decoder itself, before any model: on every route with a body."""
    paths = strict_client.get("/openapi.json").json()["paths"]
    routes = [
        (method.upper(), path)
        for path, operations in paths.items()
        for method, operation in operations.items()
        if "requestBody" in operation and path != "/hooks/coder"  # signed first (above)
    ]
    assert len(routes) >= 15
    values = {"runtime": "codex", "event": "PreToolUse", "kind": "overlay", "slug": "default"}
    values |= {"agent_id": "agent-1", "key": "key-1", "label": "key-label"}
    before = log_size(strict_client)
    for method, template in routes:
        names = [part[1:-1] for part in template.split("/") if part.startswith("{")]
        path = template.format(**{n: values.get(n, str(uuid.uuid4())) for n in names})
        response = strict_client.request(
            method, path, content=b'{"x": NaN}', headers={"content-type": "application/json"}
        )
        assert response.status_code == 400, (method, template, response.text)
        assert "NaN" in response.json()["message"], (method, template)
    assert log_size(strict_client) == before


# --- reading what an earlier release stored --------------------------------------------


def as_stored_earlier(services: Services, template: int, session_id: str, text: str) -> int:
    """A copy of dispatch `template` (a prompt "MARKER") for `session_id` whose prompt is
    `text`, written straight into the store as JSON escapes, as an earlier release could."""
    (stored,) = [n for n in read_events(services.app, template - 1, 1) if n.id == template]
    state = stored.state.replace(str(stored.originator_id).replace("-", "").encode(), b"@ID@")
    source_session = services.app.mapper.transcoder.decode(stored.state)["session_id"]
    copy = uuid.uuid4()
    state = state.replace(source_session.hex.encode(), uuid.UUID(session_id).hex.encode())
    state = state.replace(b"@ID@", copy.hex.encode()).replace(b"MARKER", text.encode())
    positions = services.app.recorder.insert_events(
        [StoredEvent(originator_id=copy, originator_version=1, topic=stored.topic, state=state)]
    )
    assert positions is not None
    return positions[0]


def stored_numbers(services: Services, session_id: str) -> int:
    """A tool input holding NaN and ±Infinity, stored as releases before strict JSON did
    (the library's encoder writes them as bare NaN and Infinity); its position."""
    tool = LifecycleEvent(
        event="PreToolUse",
        turn_id="t1",
        tool_name="Bash",
        tool_call_id="c1",
        tool_input={"nan": math.nan, "inf": math.inf, "neg": -math.inf},
    )
    numbers = run_sync(services.ingest.ingest(uuid.UUID(session_id), tool, actor="earlier-release"))
    assert numbers.position is not None
    return numbers.position


def stored_surrogates(services: Services, session_id: str) -> int:
    """A prompt holding lone surrogates, stored as `\\ud800` escapes; its position."""
    prompt = LifecycleEvent(event="UserPromptSubmit", turn_id="t0", prompt="say MARKER")
    template = run_sync(
        services.ingest.ingest(uuid.uuid4(), prompt, actor="earlier-release", create_in="default")
    )
    assert template.position is not None
    return as_stored_earlier(services, template.position, session_id, "\\ud800 and \\udfff")


def test_stored_nan_and_infinity_read_back_as_json_strings(
    strict_client: TestClient, settings: Settings
) -> None:
    services: Services = strict_client.app.state.services  # type: ignore[attr-defined]
    session_id = session(strict_client)
    position = stored_numbers(services, session_id)
    event = reads_back_as_json(strict_client, settings, session_id, position, b'"nan":NaN')
    assert event["data"]["facts"]["input"] == {"nan": "NaN", "inf": "Infinity", "neg": "-Infinity"}


def test_stored_lone_surrogates_read_back_as_replacement_characters(
    strict_client: TestClient, settings: Settings
) -> None:
    services: Services = strict_client.app.state.services  # type: ignore[attr-defined]
    session_id = session(strict_client)
    position = stored_surrogates(services, session_id)
    event = reads_back_as_json(strict_client, settings, session_id, position, b"\\ud800")
    assert event["data"]["facts"]["prompt"] == "say \ufffd and \ufffd"
    title = strict(strict_client.get(f"/api/sessions/{session_id}").text)["title"]
    assert "\ufffd" in title
    streamed = stream_messages(services, position - 1, position)
    assert any("\ufffd" in str(strict(m)) for m in streamed)


def reads_back_as_json(
    client: TestClient, settings: Settings, session_id: str, position: int, as_stored: bytes
) -> dict[str, Any]:
    """Every read of the log answers valid JSON once the event at `position` (stored
    holding `as_stored`) is in it; the event as GET /api/events shows it."""
    services: Services = client.app.state.services  # type: ignore[attr-defined]
    stored = {n.id: n.state for n in read_events(services.app, 0, 500)}
    assert as_stored in stored[position]  # written as an earlier release wrote it
    assert services.runner.wait_for(position, 15), "a projection is jammed"

    page = client.get("/api/events")
    assert page.status_code == 200, page.text
    by_position = {e["position"]: e for e in strict(page.text)["events"]}
    ndjson = client.get("/api/events", headers={"accept": "application/x-ndjson"})
    assert ndjson.status_code == 200
    assert [strict(line)["position"] for line in ndjson.text.splitlines()] == sorted(by_position)
    for path in (
        f"/api/sessions/{session_id}",
        f"/api/sessions/{session_id}/timeline",
        f"/api/sessions/{session_id}/timeline?source=log",
        f"/api/sessions/{session_id}/hooks",
        f"/api/streams/{by_position[position]['aggregateId']}",
        f"/api/streams/{by_position[position]['aggregateId']}/state",
        "/api/activity",
        "/api/sessions",
    ):
        response = client.get(path)
        assert response.status_code == 200, (path, response.text)
        strict(response.text)

    export = client.get(f"/api/sessions/{session_id}/export")
    assert export.status_code == 200, export.text
    records = [strict(line) for line in export.text.splitlines()]
    assert position in {r["position"] for r in records}
    for record in records:  # the stored bytes, unchanged, still link into the chain
        assert stored_bytes(record) == stored[record["position"]]
        assert recomputed_link(record) == record["link"]

    env = env_for(settings)
    exported = run_cli(env, "export")
    assert exported.returncode == 0, exported.stderr
    lines = [strict(line) for line in exported.stdout.splitlines()]
    assert [line["position"] for line in lines] == sorted(by_position)
    session_export = run_cli(env, "export", "--session", session_id)
    assert session_export.returncode == 0, session_export.stderr
    assert len([strict(line) for line in session_export.stdout.splitlines()]) == len(records)
    replayed = run_cli(env, "replay")
    assert replayed.returncode == 0, replayed.stdout + replayed.stderr
    verified = run_cli(env, "verify", "--json")
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert strict(verified.stdout)["ok"] is True
    return dict(by_position[position])


def stream_messages(services: Services, after: int, until: int) -> list[str]:
    """The data of the live stream's messages (GET /api/stream) after `after`, to `until`."""
    live = LiveStream(
        services.app, services.runner, Reads(services.store, services.settings.no_signal_grace_s)
    )

    async def follow() -> list[str]:
        data: list[str] = []
        started = time.monotonic()

        async def disconnected() -> bool:
            return time.monotonic() - started > 15

        async for batch in live.follow(after, disconnected):
            data += [m.encode() for m in batch]
            if any(m.id is not None and m.id >= until for m in batch):
                break
        return data

    try:
        return asyncio.run(follow())
    finally:
        live.close()


def run_cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cli.main", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_an_agents_non_json_output_stays_text() -> None:
    """A task agent's stdout is an edge too: NaN or deep nesting is not parsed as an event."""
    parser = AgentStream()
    for line in (
        '{"type":"result","result":NaN}',
        '{"type":"result","result":"\\ud800"}',
        '{"type":"result","x":' + "[" * 100_000 + "]" * 100_000 + "}",
    ):
        (record,) = parser.parse(line)
        assert record["kind"] == "text"
    assert parser.final_result is None
