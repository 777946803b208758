"""`tachograph hook claude`: the lean command-hook client against a real loopback server."""

from __future__ import annotations

import io
import json
import re
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from hook_client.command import FAIL_CLOSED_REASON, main, run_claude_command_hook

REPO_ROOT = Path(__file__).resolve().parents[2]

PRE_TOOL_USE = {
    "session_id": "s1",
    "hook_event_name": "PreToolUse",
    "tool_name": "Bash",
    "tool_input": {"command": "ls"},
    "tool_use_id": "toolu_01",
}
DENY = {
    "hookSpecificOutput": {
        "hookEventName": "PreToolUse",
        "permissionDecision": "deny",
        "permissionDecisionReason": "no",
    }
}


@dataclass
class Recorded:
    path: str
    headers: dict[str, str]
    body: Any


@dataclass
class FakeTachograph:
    """What the loopback server answers, and what it received."""

    status: int = 200
    body: bytes = b"{}"
    extra_headers: dict[str, str] = field(default_factory=dict)
    hold: bool = False
    release: threading.Event = field(default_factory=threading.Event)
    requests: list[Recorded] = field(default_factory=list)
    url: str = ""


class _Server(ThreadingHTTPServer):
    daemon_threads = False  # so server_close() joins every handler thread
    fake: FakeTachograph

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that gave up (timeout test) is expected; stay quiet."""


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def do_POST(self) -> None:
        fake = self.server.fake
        raw = self.rfile.read(int(self.headers.get("content-length", "0")))
        headers = {k.lower(): v for k, v in self.headers.items()}
        fake.requests.append(Recorded(self.path, headers, json.loads(raw)))
        if fake.hold:
            fake.release.wait(10)
        self.send_response(fake.status)
        for name, value in fake.extra_headers.items():
            self.send_header(name, value)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(fake.body)))
        self.end_headers()
        self.wfile.write(fake.body)

    def log_message(self, format: str, *args: Any) -> None:
        """Keep test output clean."""


@pytest.fixture
def tachograph() -> Iterator[FakeTachograph]:
    fake = FakeTachograph()
    server = _Server(("127.0.0.1", 0), _Handler)
    server.fake = fake
    fake.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield fake
    finally:
        fake.release.set()
        server.shutdown()
        server.server_close()
        thread.join()


@pytest.fixture
def closed_port_url() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def run_hook(
    event: str | None,
    payload: object,
    env: dict[str, str],
    *,
    fail_closed: bool = False,
) -> tuple[int, str]:
    stdin = io.StringIO(payload if isinstance(payload, str) else json.dumps(payload))
    stdout = io.StringIO()
    code = run_claude_command_hook(
        event, stdin=stdin, stdout=stdout, env=env, fail_closed=fail_closed
    )
    return code, stdout.getvalue()


def log_lines(data_dir: Path) -> list[dict[str, Any]]:
    log = data_dir / "hooks.log"
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines()]


def test_success_prints_the_server_answer_and_logs_nothing(
    tachograph: FakeTachograph, tmp_path: Path
) -> None:
    tachograph.body = json.dumps(DENY).encode()
    env = {
        "TACHOGRAPH_URL": tachograph.url + "/",
        "TACHOGRAPH_AGENT_TOKEN": "k-123",
        "TACHOGRAPH_SESSION_ID": "0b7e0d1c-0000-4000-8000-000000000001",
        "TACHOGRAPH_WORKSPACE": "demo",
        "TACHOGRAPH_HOOK_LOG": str(tmp_path / "hooks.log"),
    }

    code, out = run_hook("PreToolUse", PRE_TOOL_USE, env)

    assert code == 0
    assert out == json.dumps(DENY) + "\n"
    [request] = tachograph.requests
    assert request.path == "/hooks/claude"
    assert request.body == PRE_TOOL_USE
    assert request.headers["content-type"] == "application/json"
    assert request.headers["x-tachograph-key"] == "k-123"
    assert request.headers["x-tachograph-session-id"] == env["TACHOGRAPH_SESSION_ID"]
    assert request.headers["x-tachograph-workspace"] == "demo"
    assert log_lines(tmp_path) == []


def test_event_argument_overrides_the_payload_event(tachograph: FakeTachograph) -> None:
    code, out = run_hook(
        "Stop",
        {"session_id": "s1", "hook_event_name": "Nope"},
        {
            "TACHOGRAPH_URL": tachograph.url,
        },
    )

    assert (code, out) == (0, "{}\n")
    # The payload is relayed as Claude Code wrote it; the registration's event goes
    # beside it, and the route takes it from there (test_agent_adapters_api.py).
    assert tachograph.requests[0].body == {"session_id": "s1", "hook_event_name": "Nope"}
    assert tachograph.requests[0].headers["x-tachograph-event"] == "Stop"


def test_agent_token_is_sent_and_the_admin_key_is_not(tachograph: FakeTachograph) -> None:
    env = {
        "TACHOGRAPH_URL": tachograph.url,
        "TACHOGRAPH_AGENT_TOKEN": "agent-token",
        "TACHOGRAPH_API_KEY": "admin-key",
    }

    run_hook(None, PRE_TOOL_USE, env)

    [request] = tachograph.requests
    assert request.headers["x-tachograph-key"] == "agent-token"
    assert "admin-key" not in request.headers.values()


@pytest.mark.parametrize("agent_token", [None, ""])
def test_without_an_agent_token_the_legacy_api_key_is_sent(
    tachograph: FakeTachograph, agent_token: str | None
) -> None:
    # Setups from before agent tokens export only TACHOGRAPH_API_KEY; they keep working.
    env = {"TACHOGRAPH_URL": tachograph.url, "TACHOGRAPH_API_KEY": "legacy-key"}
    if agent_token is not None:
        env["TACHOGRAPH_AGENT_TOKEN"] = agent_token

    run_hook(None, PRE_TOOL_USE, env)

    assert tachograph.requests[0].headers["x-tachograph-key"] == "legacy-key"


def test_unset_credentials_send_no_headers(tachograph: FakeTachograph) -> None:
    env = {"TACHOGRAPH_URL": tachograph.url, "TACHOGRAPH_AGENT_TOKEN": "", "TACHOGRAPH_API_KEY": ""}

    run_hook(None, PRE_TOOL_USE, env)

    headers = tachograph.requests[0].headers
    assert not {"x-tachograph-key", "x-tachograph-session-id", "x-tachograph-workspace"} & set(
        headers
    )


def test_server_error_exits_zero_silently_and_logs_one_line(
    tachograph: FakeTachograph, tmp_path: Path
) -> None:
    tachograph.status = 500
    tachograph.body = b'{"error": "internal"}'
    env = {
        "TACHOGRAPH_URL": tachograph.url,
        "TACHOGRAPH_HOOK_LOG": str(tmp_path / "d" / "hooks.log"),
    }

    code, out = run_hook(None, PRE_TOOL_USE, env)

    assert (code, out) == (0, "")
    [line] = log_lines(tmp_path / "d")
    assert set(line) == {"at", "event", "error"}
    assert line["event"] == "PreToolUse"
    assert "HTTP 500" in line["error"]
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", line["at"])


def test_connection_refused_exits_zero_silently(closed_port_url: str, tmp_path: Path) -> None:
    env = {"TACHOGRAPH_URL": closed_port_url, "TACHOGRAPH_HOOK_LOG": str(tmp_path / "hooks.log")}

    code, out = run_hook(None, PRE_TOOL_USE, env)

    assert (code, out) == (0, "")
    [line] = log_lines(tmp_path)
    assert "refused" in line["error"].lower()


def test_timeout_is_bounded_and_exits_zero_silently(
    tachograph: FakeTachograph, tmp_path: Path
) -> None:
    tachograph.hold = True
    env = {
        "TACHOGRAPH_URL": tachograph.url,
        "TACHOGRAPH_HOOK_LOG": str(tmp_path / "hooks.log"),
        "TACHOGRAPH_HOOK_TIMEOUT_S": "0.2",
    }

    code, out = run_hook(None, PRE_TOOL_USE, env)

    assert (code, out) == (0, "")
    [line] = log_lines(tmp_path)
    assert "timed out" in line["error"]


@pytest.mark.parametrize("body", [b"not json", b"", b"[1]", b"x" * (1024 * 1024 + 10)])
def test_unusable_answer_exits_zero_silently(
    tachograph: FakeTachograph, tmp_path: Path, body: bytes
) -> None:
    tachograph.body = body
    env = {"TACHOGRAPH_URL": tachograph.url, "TACHOGRAPH_HOOK_LOG": str(tmp_path / "hooks.log")}

    assert run_hook(None, PRE_TOOL_USE, env) == (0, "")
    assert len(log_lines(tmp_path)) == 1


def test_redirect_is_not_followed(tachograph: FakeTachograph, tmp_path: Path) -> None:
    tachograph.status = 307
    tachograph.extra_headers = {"location": "http://127.0.0.1:1/steal"}
    env = {"TACHOGRAPH_URL": tachograph.url, "TACHOGRAPH_HOOK_LOG": str(tmp_path / "hooks.log")}

    assert run_hook(None, PRE_TOOL_USE, env) == (0, "")
    assert len(tachograph.requests) == 1
    assert "HTTP 307" in log_lines(tmp_path)[0]["error"]


@pytest.mark.parametrize("value", ["soon", "0", "-3", "nan", "inf"])
def test_unusable_timeout_setting_falls_back_to_the_default_and_names_it(
    tachograph: FakeTachograph, value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    env = {"TACHOGRAPH_URL": tachograph.url, "TACHOGRAPH_HOOK_TIMEOUT_S": value}

    assert run_hook(None, PRE_TOOL_USE, env) == (0, "{}\n")
    assert len(tachograph.requests) == 1
    assert f"TACHOGRAPH_HOOK_TIMEOUT_S={value!r}" in capsys.readouterr().err


def test_a_usable_timeout_setting_is_taken_silently(
    tachograph: FakeTachograph, capsys: pytest.CaptureFixture[str]
) -> None:
    env = {"TACHOGRAPH_URL": tachograph.url, "TACHOGRAPH_HOOK_TIMEOUT_S": "2.5"}

    assert run_hook(None, PRE_TOOL_USE, env) == (0, "{}\n")
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("stdin", ["", "{not json", "[]", '"PreToolUse"'])
def test_unreadable_stdin_never_breaks_the_agent(tmp_path: Path, stdin: str) -> None:
    env = {
        "TACHOGRAPH_URL": "http://127.0.0.1:9",
        "TACHOGRAPH_HOOK_LOG": str(tmp_path / "hooks.log"),
    }

    assert run_hook("UserPromptSubmit", stdin, env) == (0, "")
    [line] = log_lines(tmp_path)
    assert line["event"] == "UserPromptSubmit"
    assert "stdin" in line["error"]


def test_fail_closed_denies_a_gate_event(closed_port_url: str, tmp_path: Path) -> None:
    env = {"TACHOGRAPH_URL": closed_port_url, "TACHOGRAPH_HOOK_LOG": str(tmp_path / "hooks.log")}

    code, out = run_hook(None, PRE_TOOL_USE, env, fail_closed=True)

    assert code == 0
    assert json.loads(out) == {
        "hookSpecificOutput": {
            "hookEventName": "PreToolUse",
            "permissionDecision": "deny",
            "permissionDecisionReason": FAIL_CLOSED_REASON,
        }
    }
    assert len(log_lines(tmp_path)) == 1


def test_fail_closed_blocks_a_prompt_even_when_stdin_is_broken(tmp_path: Path) -> None:
    env = {
        "TACHOGRAPH_URL": "http://127.0.0.1:9",
        "TACHOGRAPH_HOOK_LOG": str(tmp_path / "hooks.log"),
    }

    code, out = run_hook("UserPromptSubmit", "{oops", env, fail_closed=True)

    assert code == 0
    assert json.loads(out) == {"decision": "block", "reason": FAIL_CLOSED_REASON}


def test_fail_closed_keeps_observational_events_open(closed_port_url: str, tmp_path: Path) -> None:
    env = {"TACHOGRAPH_URL": closed_port_url, "TACHOGRAPH_HOOK_LOG": str(tmp_path / "hooks.log")}
    payload = {"session_id": "s1", "hook_event_name": "PostToolUse", "tool_use_id": "t"}

    assert run_hook(None, payload, env, fail_closed=True) == (0, "")


def test_fail_closed_stop_blocks_once_then_lets_claude_stop(
    closed_port_url: str, tmp_path: Path
) -> None:
    env = {"TACHOGRAPH_URL": closed_port_url, "TACHOGRAPH_HOOK_LOG": str(tmp_path / "hooks.log")}
    stop = {"session_id": "s1", "hook_event_name": "Stop", "stop_hook_active": False}

    _, first = run_hook(None, stop, env, fail_closed=True)
    _, again = run_hook(None, {**stop, "stop_hook_active": True}, env, fail_closed=True)

    assert json.loads(first) == {"decision": "block", "reason": FAIL_CLOSED_REASON}
    assert again == ""
    assert len(log_lines(tmp_path)) == 2


def test_log_goes_to_the_users_state_directory_never_the_working_directory(
    closed_port_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    project, home = tmp_path / "project", tmp_path / "home"
    project.mkdir()
    monkeypatch.chdir(project)

    run_hook(None, PRE_TOOL_USE, {"TACHOGRAPH_URL": closed_port_url, "HOME": str(home)})
    state = {"XDG_STATE_HOME": str(tmp_path / "state"), "HOME": str(home)}
    run_hook(None, PRE_TOOL_USE, {"TACHOGRAPH_URL": closed_port_url, **state})
    # A relative setting would put the log in the project: it is ignored.
    relative = {"TACHOGRAPH_HOOK_LOG": "data/hooks.log", "XDG_STATE_HOME": "state"}
    run_hook(None, PRE_TOOL_USE, {"TACHOGRAPH_URL": closed_port_url, "HOME": str(home), **relative})

    assert len(log_lines(home / ".local" / "state" / "tachograph")) == 2
    assert len(log_lines(tmp_path / "state" / "tachograph")) == 1
    assert list(project.iterdir()) == []


def test_unwritable_log_still_never_breaks_the_agent(closed_port_url: str, tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory", encoding="utf-8")
    env = {
        "TACHOGRAPH_URL": closed_port_url,
        "TACHOGRAPH_HOOK_LOG": str(blocker / "data" / "hooks.log"),
    }

    assert run_hook(None, PRE_TOOL_USE, env) == (0, "")


def test_usage_error_exits_one_never_two(capsys: pytest.CaptureFixture[str]) -> None:
    # Claude Code treats exit code 2 as "block this action".
    assert main(["claude", "PreToolUse", "Stop"]) == 1
    assert main(["claude", "--verbose"]) == 1
    assert main(["cursor", "PreToolUse"]) == 1  # no such runtime
    usage = "usage: tachograph hook {claude|codex|gemini|copilot|qwen|droid|cline}"
    assert usage in capsys.readouterr().err


def test_module_entry_point_runs_end_to_end(tachograph: FakeTachograph, tmp_path: Path) -> None:
    tachograph.body = json.dumps(DENY).encode()
    env = {
        "PATH": "",
        "TACHOGRAPH_URL": tachograph.url,
        "TACHOGRAPH_HOOK_LOG": str(tmp_path / "hooks.log"),
        "TACHOGRAPH_AGENT_TOKEN": "agent-token",
        "PYTHONPATH": str(REPO_ROOT),
    }

    result = subprocess.run(
        [sys.executable, "-m", "hook_client.command", "claude", "PreToolUse", "--fail-closed"],
        input=json.dumps(PRE_TOOL_USE),
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=30,
        check=False,
    )

    assert (result.returncode, result.stdout, result.stderr) == (0, json.dumps(DENY) + "\n", "")
    assert tachograph.requests[0].headers["x-tachograph-key"] == "agent-token"


def test_a_pass_is_relayed_without_decoding_json(
    tachograph: FakeTachograph, tmp_path: Path
) -> None:
    # As `hook install` runs it: a file under this Python with -S. Importing json (and the
    # re and enum it pulls in) would be most of a hook's own work.
    client = REPO_ROOT / "hook_client" / "command.py"
    result = subprocess.run(
        [sys.executable, "-X", "importtime", "-S", str(client), "claude", "PreToolUse"],
        input=json.dumps(PRE_TOOL_USE),
        capture_output=True,
        text=True,
        env={"TACHOGRAPH_URL": tachograph.url, "TACHOGRAPH_HOOK_LOG": str(tmp_path / "hooks.log")},
        cwd=tmp_path,
        timeout=30,
        check=False,
    )

    assert (result.returncode, result.stdout) == (0, "{}\n")
    imported = {line.rsplit("|", 1)[-1].strip() for line in result.stderr.splitlines()}
    assert "_socket" in imported  # the -X importtime report is there and lists imports
    assert not imported & {"json", "re", "enum", "socket", "http.client", "urllib.request"}
    assert tachograph.requests[0].body == PRE_TOOL_USE


def test_import_is_lean() -> None:
    code = (
        "import hook_client.command, sys; print(sorted(m for m in sys.modules if m.split('.')[0] "
        "in {'fastapi','httpx','pydantic','eventsourcing','starlette'}))"
    )

    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        timeout=30,
        check=True,
    )

    assert result.stdout == "[]\n"


@pytest.mark.parametrize("event", ["SessionEnd", "StopFailure"])
def test_a_closing_hook_returns_before_its_delivery_is_answered(
    tachograph: FakeTachograph, tmp_path: Path, event: str
) -> None:
    # Claude Code kills hook processes ~20 ms into `-p` shutdown: these hooks hand their
    # delivery to a detached child and return at once, without waiting for the server.
    tachograph.hold = True
    payload = {"session_id": "s-1", "hook_event_name": event, "reason": "other"}
    env = {
        "PATH": "",
        "TACHOGRAPH_URL": tachograph.url,
        "TACHOGRAPH_HOOK_LOG": str(tmp_path / "hooks.log"),
    }
    hook = subprocess.run(
        [sys.executable, "-S", str(REPO_ROOT / "hook_client" / "command.py"), "claude", event],
        input=json.dumps(payload),
        capture_output=True,  # returns only once every holder of the pipes let go
        text=True,
        env=env,
        timeout=30,
        check=False,
    )
    assert (hook.returncode, hook.stdout, hook.stderr) == (0, "", "")
    assert not tachograph.release.is_set()  # the server has not answered anything yet
    tachograph.release.set()
    deadline = time.monotonic() + 10
    while not tachograph.requests and time.monotonic() < deadline:
        time.sleep(0.02)
    (delivered,) = tachograph.requests
    assert delivered.path == "/hooks/claude" and delivered.body == payload
    assert log_lines(tmp_path) == []
