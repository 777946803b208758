"""The Gemini CLI adapter with the real Gemini CLI 0.61.0, offline, against `tachograph serve`.

`scripts/agent-clis gemini` installs the pinned CLI (network only when it is not cached:
never skipped, a missing CLI fails). Each run happens inside `unshare -n` with loopback
only: tests/agents/gemini_run.py starts a policy handler, `tachograph serve` on SQLite,
the scripted Gemini API stand-in and `gemini -p` there. The hooks are installed by
`tachograph hook install gemini <HOME>` into a settings.json that turns Gemini CLI's
environment redaction on, so the agent token reaches the hook only through the names the
install allow-lists. Afterwards the test reads the data dir through the app and the CLI.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from domain.lifecycle import agent_session_uuid
from infra.settings import Settings
from tests.agents.gemini_run import (
    ADMIN_KEY,
    DENY_REASON,
    FINAL_TEXT,
    ORIGINAL_COMMAND,
    PROMPT,
)
from tests.support import free_port

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
RUNNER = Path(__file__).with_name("gemini_run.py")
TACHOGRAPH = Path(sys.executable).with_name("tachograph")
USER_SETTINGS: dict[str, Any] = {
    "security": {
        "auth": {"selectedType": "gemini-api-key"},
        "environmentVariableRedaction": {"enabled": True},
    },
    "privacy": {"usageStatisticsEnabled": False},
    "telemetry": {"enabled": False},
    "general": {"enableAutoUpdate": False, "enableAutoUpdateNotification": False},
}


@pytest.fixture(scope="module")
def gemini() -> str:
    """The pinned CLI, installed (or found cached) by scripts/agent-clis: never skipped."""
    try:
        done = subprocess.run(
            [str(ROOT / "scripts" / "agent-clis"), "gemini"],
            capture_output=True,
            text=True,
            timeout=600,
        )
    except subprocess.TimeoutExpired:
        pytest.fail("scripts/agent-clis did not finish installing Gemini CLI within 10 min")
    if done.returncode != 0:
        pytest.fail(f"scripts/agent-clis gemini failed ({done.returncode}):\n{done.stderr}")
    binary = done.stdout.strip().splitlines()[-1]
    if not Path(binary).exists():
        pytest.fail(f"scripts/agent-clis gave {binary!r}, which does not exist")
    return binary


@pytest.fixture(scope="module")
def unshare() -> None:
    if subprocess.run(["unshare", "-n", "true"], capture_output=True).returncode != 0:
        pytest.fail("unshare -n does not work here: the real-CLI test runs only offline")


def tachograph(*args: str, env: dict[str, str]) -> str:
    done = subprocess.run(
        [str(TACHOGRAPH), *args], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, (args, done.stdout, done.stderr)
    return done.stdout


def prepare(work: Path, port: int) -> tuple[dict[str, str], Path]:
    """A HOME with the user's settings and Tachograph's hooks, and an agent token."""
    settings_file = work / "home" / ".gemini" / "settings.json"
    settings_file.parent.mkdir(parents=True)
    settings_file.write_text(json.dumps(USER_SETTINGS))
    env = {
        # The venv's bin first: `hook install` pins the tachograph it finds there.
        "PATH": f"{TACHOGRAPH.parent}:{os.environ.get('PATH', '/usr/bin:/bin')}",
        "TACHOGRAPH_DATA_DIR": str(work / "data"),
        "TACHOGRAPH_WORKSPACE_ROOT": str(work / "workspace"),
        "TACHOGRAPH_API_KEY": ADMIN_KEY,
    }
    url = f"http://127.0.0.1:{port}"
    tachograph("hook", "install", "gemini", str(work / "home"), "--url", url, env=env)
    installed = json.loads(settings_file.read_text())
    assert installed["security"]["auth"] == USER_SETTINGS["security"]["auth"]
    command = installed["hooks"]["BeforeTool"][0]["hooks"][0]["command"]
    assert shlex.split(command) == [
        f"TACHOGRAPH_URL={url}",
        sys.executable,
        "-S",
        str(ROOT / "hook_client" / "command.py"),
        "gemini",
        "BeforeTool",
    ]
    token = tachograph("keys", "issue", "--role", "agent", "--workspace", "default", env=env)
    token_file = work / "token"
    token_file.write_text(token.strip())
    return env, token_file


def run_inside_netns(
    work: Path, port: int, binary: str, token_file: Path, *extra: str
) -> dict[str, Any]:
    inner = [
        sys.executable,
        str(RUNNER),
        "--work",
        str(work),
        "--serve-port",
        str(port),
        "--gemini",
        binary,
        "--token-file",
        str(token_file),
        *extra,
    ]
    script = 'ip link set lo up && exec "$@"'
    done = subprocess.run(
        ["unshare", "-n", "sh", "-c", script, "sh", *inner],
        cwd=ROOT,
        env={**os.environ, "PATH": f"{TACHOGRAPH.parent}:{os.environ.get('PATH', '')}"},
        capture_output=True,
        text=True,
        timeout=150,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    report: dict[str, Any] = json.loads((work / "report.json").read_text())
    assert report["netns"] != os.readlink("/proc/self/ns/net")  # it ran in its own netns
    return report


@pytest.fixture
def app_of(tmp_path: Path) -> Iterator[Any]:
    clients: list[TestClient] = []

    def open_app(work: Path) -> TestClient:
        settings = Settings(
            data_dir=work / "data", workspace_root=work / "workspace", api_key=ADMIN_KEY
        )
        client = TestClient(create_app(settings), headers={"x-tachograph-key": ADMIN_KEY})
        client.__enter__()
        clients.append(client)
        return client

    yield open_app
    for client in clients:
        client.__exit__(None, None, None)


def test_gemini_cli_is_governed_end_to_end(
    tmp_path: Path, gemini: str, unshare: None, app_of: Any
) -> None:
    work, port = tmp_path / "up", free_port()
    work.mkdir()
    env, token_file = prepare(work, port)
    report = run_inside_netns(work, port, gemini, token_file)
    assert report["exit"] == 0, report["stderr"]
    assert report["standin_errors"] == []
    assert FINAL_TEXT in report["stdout"]

    # The policy saw both shell commands; the deny kept the first from running, and its
    # reason reached the model in the next request.
    assert report["policy_calls"][0]["command"].endswith("rm -rf build")
    assert report["policy_calls"][1]["command"] == ORIGINAL_COMMAND
    assert "DENIED.txt" not in report["files"]
    denied_at = next(i for i, body in enumerate(report["model_requests"]) if DENY_REASON in body)
    assert denied_at == 1
    assert "Tool execution blocked" in report["model_requests"][1]
    # The rewrite replaced the whole argument object, and the rewritten command ran.
    assert "ORIGINAL.txt" not in report["files"]
    assert {"REWRITTEN.txt", "hello.txt"} <= set(report["files"])
    assert (work / "project" / "REWRITTEN.txt").read_text() == "rewritten\n"

    client = app_of(work)
    sessions = client.get("/api/sessions", params={"limit": 50}).json()["items"]
    ours = [s for s in sessions if s.get("agent") == "gemini-cli"]
    assert len(ours) == 1, sessions
    session = ours[0]
    native = session["agentSessionId"]
    assert re.fullmatch(r"[0-9a-f-]{36}", native)
    assert session["id"] == str(agent_session_uuid(f"gemini-cli:{native}"))
    chats = list((work / "home" / ".gemini" / "tmp").glob(f"*/chats/session-*{native[:8]}*"))
    assert chats, "Gemini CLI's own transcript names the same native session id"
    detail = client.get(f"/api/sessions/{session['id']}").json()
    assert detail["title"] == PROMPT
    assert detail["summary"] == FINAL_TEXT
    assert detail["status"] == "ended"
    assert detail["workspaceId"] == "default"

    audit = client.get(f"/api/sessions/{session['id']}/hooks").json()["items"]
    assert [(r["event"], r["handlerId"], r["outcome"]) for r in audit] == [
        ("SessionStart", None, "pass"),
        ("UserPromptSubmit", None, "pass"),
        ("PreToolUse", "shell-policy", "deny"),
        ("PreToolUse", "shell-policy", "modify"),
        ("PostToolUse", None, "pass"),
        ("PreToolUse", None, "pass"),  # write_file: the policy matches the shell only
        ("PostToolUse", None, "pass"),
        ("Stop", None, "pass"),
        ("SessionEnd", None, "pass"),
    ]
    assert "BeforeModel" not in {r["event"] for r in audit}  # model events: not recorded
    assert tachograph("verify", env=env)


def test_gemini_cli_completes_fast_with_the_server_down(
    tmp_path: Path, gemini: str, unshare: None
) -> None:
    work, port = tmp_path / "down", free_port()
    work.mkdir()
    _, token_file = prepare(work, port)
    report = run_inside_netns(work, port, gemini, token_file, "--server-down")
    assert report["exit"] == 0, report["stderr"]
    assert FINAL_TEXT in report["stdout"]
    assert {"DENIED.txt", "ORIGINAL.txt", "hello.txt"} <= set(report["files"])  # fail-open
    # Each hook gave up at once (connection refused): no more than the CLI's own pace.
    assert report["seconds"] < 20, report["seconds"]
    failures = (work / "hook-client" / "hooks.log").read_text().splitlines()
    events = [json.loads(line)["event"] for line in failures]
    assert events[:3] == ["SessionStart", "BeforeAgent", "BeforeTool"]
    assert "AfterAgent" in events and "SessionEnd" in events
