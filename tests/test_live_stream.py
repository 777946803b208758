"""GET /api/stream through a real `tachograph serve`, on both stores: Server-Sent Events
in log order, resumed with Last-Event-ID, readable with a reader key only."""

from __future__ import annotations

import asyncio
import json
import signal
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from bootstrap import Services
from infra.settings import Settings
from projections.sessions import SessionsProjection
from projections.tasks import TasksProjection
from projections.usage import UsageProjection
from services.live_stream import FEEDS, SESSION_UPDATED, TASK_UPDATED, LiveStream, Reads
from tests.conftest import STORES, pg_url
from tests.hook_server import HookServer, answer
from tests.support import Server

ADMIN_KEY = "live-stream-admin-key-for-tests"
ADMIN = {"x-tachograph-key": ADMIN_KEY}
DENY_REASON = "Bash is not allowed here."


@dataclass
class Message:
    event: str
    id: int | None
    data: Any


@dataclass
class Site:
    server: Server
    http: httpx.Client  # the admin's client, for writes

    def position(self, response: httpx.Response) -> int:
        assert response.is_success, response.text
        return int(response.headers["x-tachograph-position"])

    def session(self) -> str:
        created = self.http.post("/api/sessions", json={"workspaceId": "default"})
        assert created.status_code == 201, created.text
        return str(created.json()["id"])

    def rename(self, session_id: str, title: str) -> int:
        return self.position(self.http.patch(f"/api/sessions/{session_id}", json={"title": title}))

    def logged(self, after: int) -> list[tuple[int, str]]:
        """(position, type) of every streamed topic's event after `after`, from the log."""
        found: list[tuple[int, str]] = []
        while True:
            page = self.http.get("/api/events", params={"after": after, "limit": 500}).json()
            found += [(e["position"], e["type"]) for e in page["events"] if e["type"] in FEEDS]
            if page["next"] is None:
                return found
            after = page["next"]


def settings_for(store: str, base: Path) -> Settings:
    root = base / "workspace"
    root.mkdir()
    settings = Settings(data_dir=base / "data", workspace_root=root, api_key=ADMIN_KEY)
    if store == "sqlite":
        return settings
    return settings.with_(database_url=pg_url(), database_schema=f"t_{uuid.uuid4().hex[:12]}")


@pytest.fixture(scope="module", params=STORES)
def site(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Site]:
    """One server per store for the module; every test writes its own sessions and tasks."""
    base = tmp_path_factory.mktemp(f"live-{request.param}")
    settings = settings_for(str(request.param), base)
    hooks = HookServer()
    hooks.routes["/policy"] = answer("deny", reason=DENY_REASON)
    policy = {"id": "tool-policy", "type": "http", "url": f"{hooks.url}/policy"}
    env = {
        "TACHOGRAPH_HOOKS": json.dumps(
            {"version": 1, "hooks": {"PreToolUse": [{**policy, "matcher": ["Bash"]}]}}
        ),
        "TACHOGRAPH_HOOK_ALLOW_INSECURE_LOOPBACK": "1",
    }
    server = Server(settings, base / "serve.log", env)
    try:
        server.wait_ready(headers=ADMIN)
        with httpx.Client(base_url=server.url, headers=ADMIN, timeout=10) as http:
            yield Site(server, http)
    finally:
        server.kill()
        hooks.close()
        if settings.database_url is not None:
            with psycopg.connect(settings.database_url.conninfo(), autocommit=True) as conn:
                conn.execute(f'DROP SCHEMA IF EXISTS "{settings.database_schema}" CASCADE')


@contextmanager
def listening(
    site: Site, headers: dict[str, str] | None = None, **params: Any
) -> Iterator[tuple[httpx.Response, Iterator[Message]]]:
    """An open stream and its messages as they arrive (keep-alives and `retry:` skipped)."""
    with (
        httpx.Client(base_url=site.server.url, timeout=10) as client,
        client.stream(
            "GET", "/api/stream", headers={**ADMIN, **(headers or {})}, params=params
        ) as response,
    ):
        yield response, parse(response)


def parse(response: httpx.Response) -> Iterator[Message]:
    fields: dict[str, str] = {}
    for line in response.iter_lines():
        if line:
            name, _, value = line.partition(":")
            fields[name] = value.removeprefix(" ")
        elif "event" in fields:
            found = fields.get("id")
            yield Message(
                fields["event"], int(found) if found else None, json.loads(fields["data"])
            )
            fields = {}
        else:
            fields = {}


def until(messages: Iterator[Message], position: int) -> list[Message]:
    """Messages up to and including the one whose id is `position`."""
    taken: list[Message] = []
    for message in messages:
        taken.append(message)
        if message.id is not None and message.id >= position:
            return taken
    raise AssertionError(f"the stream ended before position {position}: {taken}")


def ids(messages: list[Message]) -> list[int]:
    return [m.id for m in messages if m.id is not None]


def test_events_arrive_in_log_order_with_their_positions_as_ids(site: Site) -> None:
    with listening(site) as (response, messages):
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        assert response.headers["cache-control"] == "no-cache"
        assert response.headers["x-accel-buffering"] == "no"
        start = int(response.headers["x-tachograph-position"])

        session_id = site.session()
        renamed = site.rename(session_id, "Streamed title")
        task = site.http.post("/api/tasks", json={"workspaceId": "default", "prompt": "Lint it"})
        task_id = task.json()["id"]
        cancelled = site.position(site.http.post(f"/api/tasks/{task_id}/cancel"))
        received = until(messages, cancelled)

    # Exactly the streamed events of the log since the stream opened, each once, in order.
    assert ids(received) == [p for p, _ in site.logged(start)[: len(ids(received))]]
    assert ids(received) == sorted(set(ids(received))) and ids(received)[0] > start
    assert renamed in ids(received) and cancelled == ids(received)[-1]
    by_id = {m.id: m for m in received}
    assert by_id[renamed].event == "session.updated"
    assert by_id[renamed].data["title"] == "Streamed title"
    assert by_id[cancelled].event == "task.updated"
    # The row in the GET routes' wire shape, never the activity a board must not carry.
    row = by_id[cancelled].data
    assert row["id"] == task_id and row["status"] == "cancelled" and "activity" not in row
    listed = site.http.get("/api/tasks", params={"limit": 200}).json()["items"]
    assert row == next(t for t in listed if t["id"] == task_id)


def test_a_reconnect_with_last_event_id_resumes_without_gap_or_duplicate(site: Site) -> None:
    session_id = site.session()
    with listening(site) as (response, messages):
        start = int(response.headers["x-tachograph-position"])
        first = [site.rename(session_id, f"Before the drop {n}") for n in range(3)]
        before = until(messages, first[-1])
    # While nobody listens, the log moves on.
    missed = [site.rename(session_id, f"While away {n}") for n in range(3)]
    missed.append(site.position(site.http.delete(f"/api/sessions/{session_id}")))

    resumed_from = ids(before)[-1]
    with listening(site, {"last-event-id": str(resumed_from)}) as (response, messages):
        assert int(response.headers["x-tachograph-position"]) == resumed_from
        after = until(messages, missed[-1])
    with listening(site, after=resumed_from) as (_, messages):
        assert ids(until(messages, missed[-1])) == ids(after)  # ?after= for header-less clients

    seen = ids(before) + ids(after)
    assert seen == [p for p, _ in site.logged(start)][: len(seen)]
    assert len(seen) == len(set(seen))
    assert set(first + missed) <= set(seen)
    assert after[-1].data == {"id": session_id, "deleted": True}


def test_a_denied_hook_streams_its_session_and_its_audit_records(site: Site) -> None:
    session_id = site.session()
    with listening(site) as (_, messages):
        events = f"/api/sessions/{session_id}/events"
        denied = site.http.post(events, json={"event": "PreToolUse", "toolName": "Bash"})
        assert denied.json()["outcome"] == "deny"
        passed = site.http.post(events, json={"event": "PostToolUse", "toolName": "Read"})
        received = until(messages, site.position(passed))

    at_deny = [m for m in received if m.id is None or m.id == site.position(denied)][-2:]
    # One event, two messages: the id on the last, so a cut between them loses neither.
    assert [(m.event, m.id) for m in at_deny] == [
        ("session.updated", None),
        ("hook.denied", site.position(denied)),
    ]
    assert at_deny[0].data["id"] == session_id and at_deny[0].data["status"] == "working"
    denial = at_deny[1].data
    assert denial["sessionId"] == session_id
    assert denial["dispatchId"] == denied.json()["dispatchId"]
    audit = site.http.get(f"/api/sessions/{session_id}/hooks").json()["items"]
    assert denial["records"] == [r for r in audit if r["dispatchId"] == denial["dispatchId"]]
    assert [(r["handlerId"], r["outcome"], r["reason"]) for r in denial["records"]] == [
        ("tool-policy", "deny", DENY_REASON)
    ]
    assert [m.event for m in received if m.id == site.position(passed)] == ["session.updated"]


def test_a_reader_key_streams_an_agent_token_is_refused_and_no_key_is_unauthorized(
    site: Site,
) -> None:
    session_id = site.session()
    issued = {
        role: site.http.post("/api/keys", json=body).json()["secret"]
        for role, body in {
            "reader": {"label": f"reader-{session_id[:8]}", "role": "reader"},
            "agent": {"role": "agent", "sessionId": session_id},
        }.items()
    }
    with listening(site, {"x-tachograph-key": issued["reader"]}) as (response, messages):
        assert response.status_code == 200
        renamed = site.rename(session_id, "Seen by a reader")
        assert until(messages, renamed)[-1].data["title"] == "Seen by a reader"
    agent = httpx.get(
        f"{site.server.url}/api/stream", headers={"x-tachograph-key": issued["agent"]}
    )
    assert agent.status_code == 403
    assert agent.json()["error"] == "forbidden" and agent.json()["role"] == "agent"
    anonymous = httpx.get(f"{site.server.url}/api/stream")
    assert anonymous.status_code == 401 and anonymous.json()["error"] == "unauthorized"


def test_a_bad_or_future_position_is_refused_before_streaming(site: Site) -> None:
    stream = f"{site.server.url}/api/stream"
    garbled = httpx.get(stream, headers={**ADMIN, "last-event-id": "yesterday"})
    assert garbled.status_code == 422 and "last-event-id" in garbled.json()["message"]
    negative = httpx.get(stream, headers=ADMIN, params={"after": -1})
    assert negative.status_code == 422 and "after" in negative.json()["message"]
    head = site.rename(site.session(), "The head")
    future = httpx.get(stream, headers=ADMIN, params={"after": head + 1000})
    assert future.status_code == 422
    assert future.json()["error"] == "position_not_in_log" and future.json()["field"] == "after"
    assert future.json()["position"] >= head


def test_every_row_the_sessions_and_tasks_read_models_change_is_streamed() -> None:
    streamed = {topic for topic, feeds in FEEDS.items() if SESSION_UPDATED in feeds}
    # A session's row carries its usage, which the usage read model sums.
    assert streamed == SessionsProjection().topics | UsageProjection().topics
    streamed = {topic for topic, feeds in FEEDS.items() if TASK_UPDATED in feeds}
    assert streamed == TasksProjection().topics


def test_an_idle_follower_sends_keep_alives_and_stops_on_disconnect_or_close(
    services: Services,
) -> None:
    services.start()
    live = LiveStream(
        services.app,
        services.runner,
        Reads(services.store, services.settings.no_signal_grace_s),
        poll_s=0.01,
        keepalive_s=0.05,
    )
    gone = False

    async def disconnected() -> bool:
        return gone

    async def run() -> list[int]:
        nonlocal gone
        sizes = []
        async for batch in live.follow(live.head(), disconnected):
            sizes.append(len(batch))
            if len(sizes) == 3:
                gone = True
        return sizes

    started = time.monotonic()
    assert asyncio.run(run()) == [0, 0, 0]  # three keep-alives, then the client left
    assert time.monotonic() - started < 5
    live.close()

    async def after_close() -> list[int]:
        return [len(b) async for b in live.follow(live.head(), disconnected)]

    gone = False
    assert asyncio.run(after_close()) == []


def test_a_stopping_server_ends_open_streams_and_exits_cleanly(
    settings: Settings, tmp_path: Path
) -> None:
    server = Server(settings, tmp_path / "serve.log")
    try:
        server.wait_ready()
        with (
            httpx.Client(base_url=server.url, timeout=10) as client,
            client.stream("GET", "/api/stream") as response,
        ):
            lines = response.iter_lines()
            assert next(lines) == "retry: 2000"
            stopped = time.monotonic()
            server.signal(signal.SIGTERM)
            assert list(lines) == [""]  # the stream ends instead of holding the shutdown
        assert server.wait(15) == 0, server.output()
        assert time.monotonic() - stopped < 5
    finally:
        server.kill()


def test_a_reported_model_request_streams_its_sessions_usage(site: Site) -> None:
    fixture = Path(__file__).parent / "fixtures" / "otlp" / "claude-code-2.1.328-logs.json"
    session_id = site.session()
    with listening(site) as (_, messages):
        exported = site.http.post(
            "/v1/logs",
            content=fixture.read_bytes(),
            headers={"content-type": "application/json", "x-tachograph-session-id": session_id},
        )
        received = until(messages, site.position(exported))
    updates = [m.data for m in received if m.event == "session.updated"]
    assert updates[-1]["id"] == session_id
    assert (updates[-1]["usage"]["requests"], updates[-1]["usage"]["costUsd"]) == (2, 0.0012)
    row = site.http.get(f"/api/sessions/{session_id}").json()
    assert updates[-1] == {k: v for k, v in row.items() if k != "messages"}
