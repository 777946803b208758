"""Every size a client controls is bounded: clear 413/422 answers, and nothing recorded."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from contextlib import nullcontext
from typing import Any

import pytest
from fastapi.testclient import TestClient
from hypothesis import given
from hypothesis import strategies as st

from api.app import create_app
from api.input_limits import check_json, plainly_clean
from api.middleware import HOOK_BODY_MAX_BYTES, HOOK_PATHS
from bootstrap import Services
from infra.settings import Settings
from tests.adapters.test_coder import AUDIENCE as CODER_AUDIENCE
from tests.adapters.test_coder import bearer, make_body, make_claims

MIB = 1024 * 1024
CODER_SECRET = "limits-" + "s" * 32


@pytest.fixture
def limits_client(settings: Settings) -> Iterator[TestClient]:
    coder = settings.with_(coder_hook_secret=CODER_SECRET, coder_hook_url=CODER_AUDIENCE)
    with TestClient(create_app(coder), raise_server_exceptions=False) as client:
        yield client


def coder_token() -> dict[str, str]:
    """Coder's webhook reads a body only behind a token that verifies (the body's hash
    is checked after reading it)."""
    now = int(time.time())
    claims = make_claims(make_body(), iat=now, nbf=now, exp=now + 60)
    return {"authorization": bearer(claims, secret=CODER_SECRET)}


def head(client: TestClient) -> int:
    services: Services = client.app.state.services  # type: ignore[attr-defined]
    return services.app.recorder.max_notification_id() or 0


def body_routes(client: TestClient) -> list[tuple[str, str]]:
    paths = client.get("/openapi.json").json()["paths"]
    return [
        (method.upper(), path)
        for path, operations in paths.items()
        for method, operation in operations.items()
        if "requestBody" in operation
    ]


def with_ids(path: str) -> str:
    """A path template with plausible values (the size check comes first anyway)."""
    values = {"slug": "default", "kind": "overlay", "agent_id": "agent-1", "key": "key-1"}
    values["label"] = "key-label"
    values |= {"runtime": "codex", "event": "PreToolUse"}
    for name in ("session_id", "task_id", "schedule_id", "signal_id", "revision_id", "approval_id"):
        values[name] = str(uuid.uuid4())
    return path.format(**values)


def test_every_body_route_refuses_more_than_its_cap(limits_client: TestClient) -> None:
    """1 MiB, and 16 MiB on the routes that take hooks (a big tool response must not fail)."""
    routes = body_routes(limits_client)
    assert len(routes) >= 15
    hook_routes = [path for _, path in routes if HOOK_PATHS.match(with_ids(path))]
    # /api/sessions/{id}/events, /hooks/claude, /hooks/coder, the other runtimes'
    # /hooks/{runtime} and /hooks/{runtime}/{event}, and the OTLP receiver's /v1/logs,
    # /v1/metrics and /v1/traces
    assert len(hook_routes) == 8, hook_routes
    before = head(limits_client)
    for method, path in routes:
        cap = HOOK_BODY_MAX_BYTES if path in hook_routes else MIB
        oversized = b'{"x": "' + b"a" * cap + b'"}'
        declared = limits_client.request(
            method, with_ids(path), content=oversized, headers={"content-type": "application/json"}
        )
        assert declared.status_code == 413, (method, path, declared.text)
        assert declared.json()["error"] == "payload_too_large"
        assert f"{cap // 1024} KiB" in declared.json()["message"]

        def chunks(count: int = cap // 65536 + 1) -> Iterator[bytes]:  # counted while streaming
            for _ in range(count):
                yield b" " * 65536

        token = coder_token() if path == "/hooks/coder" else {}
        streamed = limits_client.request(
            method,
            with_ids(path),
            content=chunks(),
            headers={"content-type": "application/json", **token},
        )
        assert streamed.status_code == 413, (method, path)
    assert head(limits_client) == before


def session(client: TestClient) -> str:
    return str(client.post("/api/sessions", json={"workspaceId": "default"}).json()["id"])


def task(client: TestClient) -> str:
    return str(
        client.post("/api/tasks", json={"workspaceId": "default", "prompt": "p"}).json()["id"]
    )


FIELD_LIMITS: list[tuple[str, str, dict[str, Any], str]] = [
    ("POST", "/api/workspaces", {"id": "w", "path": "p" * 1025}, "path"),
    ("POST", "/api/workspaces", {"id": "W" * 64, "path": "."}, "id"),
    ("POST", "/api/sessions", {"workspaceId": "default", "title": "t" * 201}, "title"),
    ("PATCH", "/api/sessions/{session}", {"title": "t" * 201}, "title"),
    ("POST", "/api/sessions/{session}/events", {"event": "E" * 65}, "event"),
    ("POST", "/api/sessions/{session}/events", {"event": "Stop", "eventId": "e" * 257}, "eventId"),
    ("POST", "/api/sessions/{session}/events", {"event": "Stop", "turnId": "t" * 257}, "turnId"),
    (
        "POST",
        "/api/sessions/{session}/events",
        {"event": "Stop", "toolName": "x" * 257},
        "toolName",
    ),
    ("POST", "/api/tasks", {"workspaceId": "default", "prompt": "p" * (256 * 1024 + 1)}, "prompt"),
    ("POST", "/api/tasks", {"workspaceId": "default", "prompt": "p", "model": "m" * 201}, "model"),
    (
        "POST",
        "/api/tasks",
        {"workspaceId": "default", "prompt": "p", "maxAttempts": 11},
        "maxAttempts",
    ),
    ("POST", "/api/tasks/{task}/resolve", {"summary": "s" * 2049}, "summary"),
    (
        "POST",
        "/api/schedules",
        {"workspaceId": "default", "name": "n" * 201, "cron": "* * * * *", "prompt": "p"},
        "name",
    ),
    (
        "POST",
        "/api/schedules",
        {"workspaceId": "default", "name": "n", "cron": "*" * 201, "prompt": "p"},
        "cron",
    ),
    (
        "PUT",
        "/api/autonomy/targets/overlay/agent-1/key-1",
        {"content": "c" * (16 * 1024 + 1)},
        "content",
    ),
    (
        "POST",
        "/api/autonomy/signals",
        {"agentId": "a" * 129, "traceId": "t", "kind": "outcome", "goal": "g"},
        "agentId",
    ),
    (
        "POST",
        "/api/autonomy/signals",
        {"agentId": "a", "traceId": "t" * 257, "kind": "outcome", "goal": "g"},
        "traceId",
    ),
]


@pytest.mark.parametrize(("method", "path", "body", "field"), FIELD_LIMITS)
def test_oversized_fields_are_422_naming_the_field(
    limits_client: TestClient, method: str, path: str, body: dict[str, Any], field: str
) -> None:
    client = limits_client
    path = path.replace("{session}", session(client)).replace("{task}", task(client))
    before = head(client)
    response = client.request(method, path, json=body)
    assert response.status_code == 422, response.text
    assert response.json()["error"] in ("validation_error", "unknown_field")
    assert field in response.json()["message"]
    assert head(client) == before


BAD_TEXT: list[tuple[str, bytes, str]] = [
    ("NUL", b'{"workspaceId": "default", "title": "a\\u0000b"}', "NUL"),
    ("lone surrogate", b'{"workspaceId": "default", "title": "a\\ud800b"}', "surrogate"),
]


@pytest.mark.parametrize(("what", "raw", "says"), BAD_TEXT, ids=[b[0] for b in BAD_TEXT])
def test_text_no_store_can_hold_is_refused(
    limits_client: TestClient, what: str, raw: bytes, says: str
) -> None:
    before = head(limits_client)
    response = limits_client.post(
        "/api/sessions", content=raw, headers={"content-type": "application/json"}
    )
    assert response.status_code == 422 and says in response.json()["message"]
    session_id = session(limits_client)
    nested = json.dumps({"revision": 0, "messages": [{"text": "x"}]}).replace('"x"', '"x\\u0000"')
    saved = limits_client.put(
        f"/api/sessions/{session_id}", content=nested, headers={"content-type": "application/json"}
    )
    assert saved.status_code == 422 and "messages.0.text" in saved.json()["message"]
    hook = limits_client.post(
        f"/api/sessions/{session_id}/events",
        content=b'{"event": "UserPromptSubmit", "prompt": "hi\\u0000"}',
        headers={"content-type": "application/json"},
    )
    assert hook.status_code == 422
    claude = limits_client.post(
        "/hooks/claude",
        content=b'{"hook_event_name": "UserPromptSubmit", "session_id": "s", "prompt": "\\ud800"}',
        headers={"content-type": "application/json"},
    )
    assert claude.status_code == 422
    assert head(limits_client) == before + 2  # only the session created on purpose


def test_nesting_deeper_than_64_levels_is_refused(limits_client: TestClient) -> None:
    session_id = session(limits_client)
    before = head(limits_client)
    deep: Any = "leaf"
    for _ in range(70):
        deep = [deep]
    saved = limits_client.put(f"/api/sessions/{session_id}", json={"revision": 0, "messages": deep})
    assert saved.status_code == 422 and "nested deeper than 64" in saved.json()["message"]
    very_deep = b'{"revision": 0, "messages": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    parsed = limits_client.put(
        f"/api/sessions/{session_id}",
        content=very_deep,
        headers={"content-type": "application/json"},
    )
    assert parsed.status_code in (400, 422)
    shallow: Any = "leaf"
    for _ in range(60):
        shallow = [shallow]
    ok = limits_client.put(f"/api/sessions/{session_id}", json={"revision": 0, "messages": shallow})
    assert ok.status_code == 200
    assert head(limits_client) == before + 1


@pytest.mark.parametrize(
    "query",
    [
        "/api/events?after=9223372036854775808",
        "/api/sessions?minPosition=99999999999999999999999",
        "/api/log/checkpoints?beforeSeq=9223372036854775808",
        "/api/tasks?limit=201",
        "/api/events?limit=501",
        "/api/tasks?source=a%00b",
        "/api/events?type=" + "T" * 201,
    ],
)
def test_query_parameters_are_bounded(limits_client: TestClient, query: str) -> None:
    response = limits_client.get(query)
    assert response.status_code == 422, response.text
    assert response.json()["error"] == "validation_error"


def test_state_version_beyond_64_bits_is_422(limits_client: TestClient) -> None:
    session_id = session(limits_client)
    response = limits_client.get(f"/api/streams/{session_id}/state?version=9223372036854775808")
    assert response.status_code == 422


def test_a_position_beyond_the_log_is_422_at_once(limits_client: TestClient) -> None:
    far = head(limits_client) + 1000
    response = limits_client.get("/api/sessions", params={"minPosition": far})
    assert response.status_code == 422
    assert response.json()["error"] == "position_not_in_log"
    header = limits_client.get("/api/tasks", headers={"x-tachograph-min-position": str(far)})
    assert header.status_code == 422


def test_claude_fields_share_the_ingest_limits(limits_client: TestClient) -> None:
    before = head(limits_client)
    long_session = limits_client.post(
        "/hooks/claude", json={"hook_event_name": "Stop", "session_id": "s" * 300}
    )
    assert long_session.status_code == 422 and "agentSessionId" in long_session.json()["message"]
    assert head(limits_client) == before


def test_signal_evidence_is_stored_bounded(limits_client: TestClient) -> None:
    body = {
        "agentId": "agent-1",
        "traceId": "trace-1",
        "kind": "failure",
        "goal": "g" * 100_000,
        "failure": "f" * 100_000,
    }
    created = limits_client.post("/api/autonomy/signals", json=body)
    assert created.status_code == 201, created.text
    signal = limits_client.get(f"/api/autonomy/signals/{created.json()['id']}").json()
    assert len(signal["goal"].encode()) <= 2048 and len(signal["failure"].encode()) <= 2048


def test_a_nul_that_reaches_the_log_never_jams_a_projection(
    limits_client: TestClient, settings: Settings
) -> None:
    # The API refuses NUL, but events can carry one anyway (a hook handler's reason,
    # events recorded before this check): PostgreSQL text cannot hold it.
    services: Services = limits_client.app.state.services  # type: ignore[attr-defined]
    recorded = services.app.create_session("default", "left\x00right", "system")
    assert services.runner.wait_for(recorded.position or 0, 10)
    row = limits_client.get(f"/api/sessions/{recorded.aggregate_id}").json()
    expected = "left\x00right" if settings.database_url is None else "left\ufffdright"
    assert row["title"] == expected
    assert limits_client.post("/api/sessions", json={"workspaceId": "default"}).status_code == 201


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=5), children, max_size=3)
    ),
    max_leaves=80,
)


@given(value=JSON_VALUES, ascii_only=st.booleans())
def test_a_plainly_clean_body_always_passes_the_full_text_check(
    value: Any, ascii_only: bool
) -> None:
    raw = json.dumps(value, ensure_ascii=ascii_only).encode("utf-8", "surrogatepass")
    if plainly_clean(raw):
        check_json(json.loads(raw))  # must not raise: the shortcut may only skip clean input


@given(raw=st.binary(max_size=64))
def test_no_byte_string_fools_the_shortcut(raw: bytes) -> None:
    try:
        value = json.loads(raw)
    except (ValueError, RecursionError):
        return
    if plainly_clean(raw):
        check_json(value)


@pytest.mark.parametrize(
    "raw",
    [
        b'{"event": "PostToolUse", "toolInput": {"command": "a\\u0000b"}}',
        b'{"event": "PostToolUse", "toolInput": {"\\ud800": 1}}',
        b'{"event": "PostToolUse", "prompt": "\xed\xa0\x80"}',  # a raw surrogate
        '{"event": "PostToolUse", "prompt": "\ud800"}'.encode("utf-16-le", "surrogatepass"),
        b'{"event": "PostToolUse", "toolInput": ' + b"[" * 70 + b"]" * 70 + b"}",
    ],
    ids=["nul", "surrogate-key", "raw-surrogate", "utf-16", "deep"],
)
def test_the_ingest_hot_path_refuses_what_no_store_can_hold(
    limits_client: TestClient, raw: bytes
) -> None:
    session_id = session(limits_client)
    before = head(limits_client)
    response = limits_client.post(
        f"/api/sessions/{session_id}/events",
        content=raw,
        headers={"content-type": "application/json"},
    )
    assert response.status_code == 422, response.text
    assert head(limits_client) == before


def test_a_nul_in_a_bulk_insert_is_stored_as_in_a_single_row(
    services: Services, settings: Settings
) -> None:
    # Projections insert rows in bulk (on PostgreSQL one statement over column arrays):
    # the NUL rule must hold there too, and leave other values of the column alone.
    # A rebuild's bulk load (on PostgreSQL: COPY) must store them the same way.
    rows = [("a", "plain"), ("b", None), ("c", "left\x00right"), ("d", "\x00")]
    for table, bulk in (
        ("bulk_nul", nullcontext()),
        ("bulk_nul_loaded", services.store.bulk_load()),
    ):
        with bulk, services.store.transaction() as cur:
            cur.execute(f"CREATE TABLE {table} (id TEXT PRIMARY KEY, body TEXT)")
            cur.executemany(f"INSERT INTO {table} (id, body) VALUES (?, ?)", rows)
        stored = {r["id"]: r["body"] for r in services.store.query(f"SELECT * FROM {table}")}
        if settings.database_url is None:
            assert stored == dict(rows)
        else:
            assert stored == {"a": "plain", "b": None, "c": "left\ufffdright", "d": "\ufffd"}
