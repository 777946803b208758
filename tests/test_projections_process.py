"""`serve` applies its log to the read models in a process of its own (the default,
TACHOGRAPH_PROJECTIONS=process), on both stores.

Checked through the real processes: a read asking for an acknowledged position sees
it; a policy activated over HTTP judges the very next call (serve's in-memory copy is
reloaded before the position counts as reached); the child holds none of serve's
secrets it has no use for; serve starts it again when it ends alone, reads wait for it
meanwhile rather than answer stale; it ends with serve however serve ends; a stopped
serve still records its shutdown checkpoint; started by hand it says serve starts it;
and TACHOGRAPH_PROJECTIONS=thread starts no child.
"""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from cli.child_process import send_settings
from infra.settings import Settings
from tests.support import Server, gone, live_children, within
from tests.test_policy_api import NO_FORCE_PUSH, decision_of, pre_tool_use

ADMIN = "projections-admin-key-0123456789abcdef"
SIGNING = "projections-signing-key-0123456789abcdef"
CODER = "projections-coder-secret-0123456789abcdef"
EVENT = {"event": "PostToolUse", "toolName": "Bash", "toolCallId": "c1", "toolInput": {}}


class Running:
    def __init__(self, server: Server) -> None:
        self.server = server
        self.http = httpx.Client(
            base_url=server.url, headers={"x-tachograph-key": ADMIN}, timeout=30
        )
        self.posted: dict[str, int] = {}

    def child(self) -> int:
        live = live_children(self.server.popen.pid, "projections")
        assert len(live) == 1, (live, self.server.output()[-2000:])
        return live[0]

    def session(self) -> str:
        created = self.http.post("/api/sessions", json={"workspaceId": "default"})
        assert created.status_code == 201, created.text
        return str(created.json()["id"])

    def ingest_and_read(self, session: str) -> bool:
        """Post an event, then ask for the session's hooks at its position: True when
        the answer holds every call posted so far (one audit record each)."""
        call = {**EVENT, "toolCallId": f"call-{uuid.uuid4().hex[:8]}"}
        acked = self.http.post(f"/api/sessions/{session}/events", json=call)
        assert acked.status_code in (200, 201), acked.text
        self.posted[session] = self.posted.get(session, 0) + 1
        read = self.http.get(
            f"/api/sessions/{session}/hooks",
            params={"minPosition": acked.headers["x-tachograph-position"]},
        )
        if read.status_code != 200:
            return False
        calls = [h for h in read.json()["items"] if h["event"] == "PostToolUse"]
        return len(calls) == self.posted[session]


def start(settings: Settings, tmp_path: Path, **env: str) -> Server:
    extra = {
        "TACHOGRAPH_LOG_SIGNING_KEY": SIGNING,
        "TACHOGRAPH_CODER_HOOK_SECRET": CODER,
        "TACHOGRAPH_CODER_HOOK_URL": "http://127.0.0.1:9/coder",
        **env,
    }
    return Server(settings.with_(api_key=ADMIN), tmp_path / "serve.log", extra)


@pytest.fixture
def running(settings: Settings, tmp_path: Path) -> Iterator[Running]:
    server = start(settings, tmp_path)
    try:
        server.wait_ready(headers={"x-tachograph-key": ADMIN})
        ran = Running(server)
        with ran.http:
            yield ran
    finally:
        server.kill()


def test_a_read_at_an_acknowledged_position_sees_it(running: Running) -> None:
    running.child()
    session = running.session()
    assert all(running.ingest_and_read(session) for _ in range(20))


def test_a_policy_activated_over_http_judges_the_next_call(running: Running) -> None:
    running.child()
    recorded = running.http.post("/api/policy/revisions", json={"source": NO_FORCE_PUSH})
    assert recorded.status_code == 201, recorded.text
    activated = running.http.post(f"/api/policy/revisions/{recorded.json()['id']}/activate")
    assert activated.status_code == 200, activated.text
    push = pre_tool_use(str(uuid.uuid4()), "git push --force origin main")
    assert decision_of(running.http.post("/hooks/claude", json=push))[0] == "deny"


def test_the_child_holds_none_of_the_secrets_it_does_not_use(running: Running) -> None:
    child = running.child()
    environ = Path(f"/proc/{child}/environ").read_bytes()
    cmdline = Path(f"/proc/{child}/cmdline").read_bytes()
    assert environ  # readable: this is the child's own environment
    for secret in (ADMIN, SIGNING, CODER):
        assert secret.encode() not in environ
        assert secret.encode() not in cmdline
    assert b"TACHOGRAPH_API_KEY" not in environ


def test_serve_starts_it_again_and_it_ends_when_serve_dies(running: Running) -> None:
    session = running.session()
    first = running.child()
    os.kill(first, signal.SIGKILL)
    # Reads in the meantime wait for the replacement (or time out), never answer stale.
    assert running.ingest_and_read(session) or running.ingest_and_read(session)
    second = running.child()
    assert second != first
    assert "starting it again" in running.server.output()
    running.server.popen.send_signal(signal.SIGKILL)  # no chance to stop its child
    running.server.wait(10)
    assert within(10, lambda: gone(second))


def test_a_stopped_serve_stops_it_and_records_its_shutdown_checkpoint(
    running: Running,
) -> None:
    session = running.session()
    assert running.ingest_and_read(session)
    child = running.child()
    running.server.signal(signal.SIGTERM)
    assert running.server.wait(30) == 0
    assert gone(child)
    output = running.server.output()
    assert "log checkpoint at shutdown" in output, output[-3000:]
    assert "starting it again" not in output


def test_started_by_hand_it_says_serve_starts_it() -> None:
    ran = subprocess.run(
        [sys.executable, "-m", "cli.main", "projections"],
        input=b"not serve's settings",
        capture_output=True,
        timeout=60,
        cwd=Path(__file__).resolve().parents[1],
    )
    assert ran.returncode == 2
    assert b"tachograph serve" in ran.stderr


def test_given_settings_but_no_report_pipe_it_says_serve_starts_it(settings: Settings) -> None:
    sent = io.BytesIO()
    send_settings(sent, settings)
    ran = subprocess.run(
        [sys.executable, "-m", "cli.main", "projections"],
        input=sent.getvalue(),
        capture_output=True,
        timeout=60,
        cwd=Path(__file__).resolve().parents[1],
    )
    assert ran.returncode == 2
    assert b"tachograph serve" in ran.stderr and b"reports" in ran.stderr


def test_in_a_thread_there_is_no_child(settings: Settings, tmp_path: Path) -> None:
    server = start(settings, tmp_path, TACHOGRAPH_PROJECTIONS="thread")
    try:
        server.wait_ready(headers={"x-tachograph-key": ADMIN})
        ran = Running(server)
        with ran.http:
            assert ran.ingest_and_read(ran.session())
            assert live_children(server.popen.pid, "projections") == []
    finally:
        server.kill()


def test_the_child_ends_at_once_on_signals_however_many_arrive(running: Running) -> None:
    child = running.child()
    for _ in range(20):  # serve's stop, the kernel's on serve's death, an operator's
        try:
            os.kill(child, signal.SIGTERM)
        except ProcessLookupError:
            break  # ended and reaped by serve already
        time.sleep(0.005)
    assert within(5, lambda: gone(child)), "the child did not end on SIGTERM"
