"""`serve` with TACHOGRAPH_OTLP_PORT: the OTLP receiver in a process of its own, on both
stores.

What is checked through the real processes: an export to the receiver's port is the
session's usage on the main port, once however often it is sent; the receiver refuses
what the main port refuses (no token, a reader's, another workspace's); it holds none
of serve's secrets in its environment; it ends with serve, however serve ends, and
serve starts it again when it ends alone; a port it cannot take stops serve with the
setting named.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from domain.lifecycle import agent_session_uuid
from infra.settings import Settings
from tests.support import Server, free_port, gone, live_children, within
from tests.test_usage_api import CLAUDE_LOGS, CLAUDE_NATIVE, TWO_REQUESTS, with_session

ADMIN = "receiver-admin-key-0123456789abcdef"
SIGNING = "receiver-signing-key-0123456789abcdef"
JSON = {"content-type": "application/json"}


class Running:
    """serve, its receiver's URL and an admin client of the main port."""

    def __init__(self, server: Server, receiver: str, settings: Settings) -> None:
        self.server = server
        self.settings = settings
        self.receiver = receiver
        self.main = httpx.Client(
            base_url=server.url, headers={"x-tachograph-key": ADMIN}, timeout=30
        )

    def issue(self, role: str, **binding: str) -> str:
        label = "-".join((role, *binding.values()))
        answer = self.main.post("/api/keys", json={"role": role, "label": label, **binding})
        assert answer.status_code == 201, answer.text
        return str(answer.json()["secret"])

    def receiver_pid(self) -> int:
        health = httpx.get(f"{self.receiver}/health", timeout=5)
        assert health.json()["role"] == "otlp-receiver"
        live = live_children(self.server.popen.pid, "otlp-receiver")
        assert len(live) == 1, live
        return live[0]


def start(settings: Settings, tmp_path: Path, port: int | None = None) -> Server:
    env = {"TACHOGRAPH_OTLP_PORT": str(port or free_port()), "TACHOGRAPH_LOG_SIGNING_KEY": SIGNING}
    return Server(settings.with_(api_key=ADMIN), tmp_path / "serve.log", env)


@pytest.fixture
def running(settings: Settings, tmp_path: Path) -> Iterator[Running]:
    port = free_port()
    server = start(settings, tmp_path, port)
    try:
        server.wait_ready(headers={"x-tachograph-key": ADMIN})
        ran = Running(server, f"http://127.0.0.1:{port}", settings)
        with ran.main:
            yield ran
    finally:
        server.kill()


def export(running: Running, token: str | None, body: Any, **headers: str) -> httpx.Response:
    sent = {**JSON, **headers}
    if token is not None:
        sent["x-tachograph-key"] = token
    return httpx.post(f"{running.receiver}/v1/logs", content=json.dumps(body), headers=sent)


def test_an_export_to_the_receivers_port_is_the_sessions_usage_once(running: Running) -> None:
    agent = running.issue("agent", workspaceId="default")
    hook = {"session_id": CLAUDE_NATIVE, "hook_event_name": "SessionStart", "source": "startup"}
    started = httpx.post(
        f"{running.server.url}/hooks/claude", json=hook, headers={"x-tachograph-key": agent}
    )
    assert started.status_code == 200, started.text
    session_id = str(agent_session_uuid(f"claude-code:{CLAUDE_NATIVE}"))
    taken = export(running, agent, CLAUDE_LOGS)
    assert (taken.status_code, taken.json()) == (200, {})
    position = taken.headers["x-tachograph-position"]
    # The main process reads what the receiver appended: its read models follow the log.
    session = running.main.get(f"/api/sessions/{session_id}", params={"minPosition": position})
    assert session.status_code == 200, session.text
    assert session.json()["usage"] == TWO_REQUESTS
    again = export(running, agent, CLAUDE_LOGS)  # the exporter's retry
    assert again.json() == {} and "x-tachograph-position" not in again.headers
    by_session = running.main.get("/api/usage", params={"groupBy": "session"}).json()["items"]
    assert by_session == [{"key": session_id, **TWO_REQUESTS}]
    counted = httpx.get(f"{running.receiver}/metrics").text
    assert 'tachograph_otlp_records_total{outcome="recorded",signal="logs"} 2.0' in counted
    assert 'tachograph_otlp_records_total{outcome="repeated",signal="logs"} 2.0' in counted
    if running.settings.database_url is None:
        # Both processes appended to one SQLite log, taking turns (infra/sqlite_recorder.py).
        assert (running.settings.data_dir / "tachograph.sqlite-writers.lock").exists()


def test_the_receiver_refuses_what_the_main_port_refuses(
    running: Running, settings: Settings
) -> None:
    nobody = export(running, None, CLAUDE_LOGS)
    main = httpx.post(
        f"{running.server.url}/v1/logs", content=json.dumps(CLAUDE_LOGS), headers=JSON
    )
    assert (nobody.status_code, nobody.json()) == (401, main.json())
    assert export(running, running.issue("reader"), CLAUDE_LOGS).status_code == 403
    (settings.workspace_root / "team-b").mkdir()
    added = running.main.post("/api/workspaces", json={"id": "team-b", "path": "team-b"})
    assert added.status_code in (200, 201), added.text
    other = running.main.post("/api/sessions", json={"workspaceId": "team-b"}).json()["id"]
    bound = running.issue("agent", workspaceId="default")
    refused = export(
        running, bound, with_session(CLAUDE_LOGS, "other-1"), **{"x-tachograph-session-id": other}
    )
    assert refused.status_code == 200
    assert refused.json()["partialSuccess"]["rejectedLogRecords"] == "2"
    bad = httpx.post(
        f"{running.receiver}/v1/logs",
        content=b'{"resourceLogs": NaN}',
        headers={**JSON, "x-tachograph-key": bound},
    )
    assert bad.status_code == 400 and "NaN" in bad.json()["message"]
    usage = running.main.get("/api/usage", params={"groupBy": "workspace"}).json()["items"]
    assert usage == []


def test_keys_issued_one_after_another_work_on_the_receiver_at_once(running: Running) -> None:
    """The receiver learns of a new key by reading the log (at most one such read per
    50 ms): a key first used just after another one's read waits for the next, and is
    never refused for having come too soon."""

    def fresh(label: str) -> str:
        body = {"role": "agent", "label": label, "workspaceId": "default"}
        answer = running.main.post("/api/keys", json=body)
        assert answer.status_code == 201, answer.text
        return str(answer.json()["secret"])

    for i in range(5):
        # The second key is issued after the receiver's read for the first, and used
        # within milliseconds of it.
        assert export(running, fresh(f"fresh-{i}-a"), CLAUDE_LOGS).status_code == 200
        assert export(running, fresh(f"fresh-{i}-b"), CLAUDE_LOGS).status_code == 200
    guessed = "tgk_" + "x" * 43
    assert export(running, guessed, CLAUDE_LOGS).status_code == 401


def test_the_receiver_holds_none_of_serves_secrets_in_its_environment(
    running: Running,
) -> None:
    environ = Path(f"/proc/{running.receiver_pid()}/environ").read_bytes()
    assert environ  # readable: this is the receiver's own environment
    for secret in (ADMIN, SIGNING):
        assert secret.encode() not in environ
    assert b"TACHOGRAPH_API_KEY" not in environ
    assert b"TACHOGRAPH_LOG_SIGNING_KEY" not in environ


def test_serve_starts_its_receiver_again_and_takes_it_down_when_serve_dies(
    running: Running,
) -> None:
    first = running.receiver_pid()
    os.kill(first, signal.SIGKILL)
    again = within(20, lambda: _answering(running) and running.receiver_pid() != first)
    assert again, running.server.output()[-3000:]
    second = running.receiver_pid()
    running.server.popen.send_signal(signal.SIGKILL)  # no chance to stop its receiver
    running.server.wait(10)
    assert within(10, lambda: not Path(f"/proc/{second}").exists() or gone(second))


def test_a_port_the_receiver_cannot_take_stops_serve_naming_the_setting(
    settings: Settings, tmp_path: Path
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        server = start(settings, tmp_path, taken.getsockname()[1])
        try:
            status = server.wait(60)
        finally:
            server.kill() if server.popen.poll() is None else None
    assert status != 0
    assert "TACHOGRAPH_OTLP_PORT" in server.output()


def _answering(running: Running) -> bool:
    try:
        return httpx.get(f"{running.receiver}/health", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def test_the_receiver_started_by_hand_says_serve_starts_it() -> None:
    ran = subprocess.run(
        [sys.executable, "-m", "cli.main", "otlp-receiver", "--port", str(free_port())],
        input=b"not serve's settings",
        capture_output=True,
        timeout=60,
        cwd=Path(__file__).resolve().parents[1],
    )
    assert ran.returncode == 2
    assert b"TACHOGRAPH_OTLP_PORT" in ran.stderr


def test_a_stopped_serve_stops_its_receiver_first(running: Running) -> None:
    receiver = running.receiver_pid()
    running.server.signal(signal.SIGTERM)
    assert running.server.wait(30) == 0
    assert not Path(f"/proc/{receiver}").exists() or gone(receiver)
    assert "starting it again" not in running.server.output()
