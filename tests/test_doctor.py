"""`tachograph doctor`: one line per check, non-zero exit on any failure, not on warnings."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from bootstrap import build_services
from infra.settings import Settings
from tests.support import Server, env_for

VENV_BIN = str(Path(sys.executable).parent)


def tachograph(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cli.main", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def doctor(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return tachograph(["doctor"], env)


def test_healthy_setup_passes_every_check(settings: Settings, tmp_path: Path) -> None:
    build_services(settings).close()  # the server has run: its log exists
    env = {
        **env_for(settings.with_(api_key="doctor-admin-key")),
        "PATH": VENV_BIN + os.pathsep + "/usr/bin:/bin",
        "HOME": str(tmp_path),
    }
    result = doctor(env)
    lines = result.stdout.splitlines()
    assert [line.split()[1].rstrip(":") for line in lines] == [
        "settings",
        "database",
        "hooks",
        "hooks.log",
        "executor",
        "path",
        "credentials",
        "runtimes",
        "holds",
    ]
    assert result.returncode == 0, result.stdout
    assert all(line.startswith("ok") for line in lines)


@pytest.mark.parametrize("store_kind", ["sqlite"], indirect=True)
def test_each_problem_is_reported_and_fails(settings: Settings) -> None:
    build_services(settings).close()
    (settings.data_dir / "hooks.log").write_text(
        json.dumps({"at": "now", "event": "PreToolUse", "error": "connection refused"}) + "\n"
    )
    env = {
        **env_for(settings),
        "PATH": "/usr/bin:/bin",
        "TACHOGRAPH_TASK_COMMAND": '["definitely-not-installed-agent", "{prompt}"]',
    }
    result = doctor(env)
    assert result.returncode == 1
    failed = {
        line.split()[1].rstrip(":")
        for line in result.stdout.splitlines()
        if line.startswith("FAIL")
    }
    assert failed == {"hooks.log", "executor", "path"}
    assert "connection refused" in result.stdout
    # A warning is reported beside the failures but is not one of them.
    assert "WARN credentials: TACHOGRAPH_API_KEY is unset" in result.stdout


def test_bad_settings_fail_first(tmp_path: Path) -> None:
    result = doctor({"PATH": "/usr/bin:/bin", "TACHOGRAPH_TIMEZONE": "Nowhere/Land"})
    assert result.returncode == 1
    assert result.stdout.startswith("FAIL settings: TACHOGRAPH_TIMEZONE")


@pytest.mark.parametrize("store_kind", ["postgres"], indirect=True)
def test_unreachable_database_fails(settings: Settings) -> None:
    env = {
        **env_for(settings),
        "PATH": VENV_BIN + os.pathsep + "/usr/bin:/bin",
        "TACHOGRAPH_DATABASE_URL": "postgresql://postgres@127.0.0.1:9/test",
    }
    result = doctor(env)
    assert result.returncode == 1
    assert any(line.startswith("FAIL database") for line in result.stdout.splitlines())


@pytest.mark.parametrize("store_kind", ["sqlite"], indirect=True)
def test_runtime_hooks_that_cannot_work_are_reported(settings: Settings, tmp_path: Path) -> None:
    build_services(settings).close()
    home = tmp_path / "home"
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{sock.getsockname()[1]}"
    env = {**env_for(settings), "PATH": VENV_BIN + os.pathsep + "/usr/bin:/bin", "HOME": str(home)}
    for runtime in ("codex", "gemini", "copilot"):
        installed = tachograph(["hook", "install", runtime, str(home), "--url", dead], env)
        assert installed.returncode == 0, installed.stderr
    hooks_file = home / ".codex" / "hooks.json"
    hooks_file.write_text(hooks_file.read_text().replace(sys.executable, "/no/such/python"))
    result = doctor(env)
    warned = [line for line in result.stdout.splitlines() if line.startswith("WARN runtimes:")]
    for runtime in ("gemini", "copilot"):
        reach = f"{runtime} hooks reach {dead}, which does not answer"
        assert any(reach in w for w in warned), warned
    assert any("codex hooks run /no/such/python, which does not exist" in w for w in warned), (
        result.stdout
    )
    assert result.returncode == 0  # warnings, not failures


def test_gate_hooks_that_fail_open_and_refused_tokens_are_reported(
    settings: Settings, tmp_path: Path
) -> None:
    home, project = tmp_path / "home", tmp_path / "project"
    closed_policy = {
        "version": 1,
        "hooks": {
            "PreToolUse": [
                {
                    "id": "policy",
                    "type": "http",
                    "url": "http://127.0.0.1:9/policy",
                    "failureMode": "closed",
                }
            ]
        },
    }
    env = {
        **env_for(settings.with_(api_key="doctor-admin-key")),
        "PATH": VENV_BIN + os.pathsep + "/usr/bin:/bin",
        "HOME": str(home),
        "TACHOGRAPH_HOOKS": json.dumps(closed_policy),
        "TACHOGRAPH_HOOK_ALLOW_INSECURE_LOOPBACK": "1",
    }
    issued = tachograph(["keys", "issue", "--role", "agent", "--workspace", "default"], env)
    assert issued.returncode == 0, issued.stderr
    token = issued.stdout.strip()
    server = Server(settings.with_(api_key="doctor-admin-key"), tmp_path / "serve.log", env)
    try:
        server.wait_ready(headers={"x-tachograph-key": "doctor-admin-key"})
        # Claude Code over HTTP (its gates fail open); Codex with fail-closed gate commands.
        for args in (
            ["claude", str(project), "--http"],
            ["codex", str(home), "--fail-closed"],
        ):
            installed = tachograph(["hook", "install", *args, "--url", server.url], env)
            assert installed.returncode == 0, installed.stderr

        good = doctor(
            {**env, "TACHOGRAPH_AGENT_TOKEN": token, "TACHOGRAPH_WORKSPACE_ROOT": str(project)}
        )
        bad = doctor(
            {
                **env,
                "TACHOGRAPH_AGENT_TOKEN": "not-a-key",
                "TACHOGRAPH_WORKSPACE_ROOT": str(project),
            }
        )
    finally:
        server.kill()

    warned = [line for line in good.stdout.splitlines() if line.startswith("WARN runtimes:")]
    [fail_open] = [w for w in warned if "closed handler(s) policy" in w]
    claude_file = project / ".claude" / "settings.local.json"
    assert (
        f"{claude_file} (PermissionRequest, PreToolUse, Stop, SubagentStart, UserPromptSubmit)"
        in fail_open
    )
    assert ".codex" not in fail_open  # its gates are commands installed --fail-closed
    assert not any("refuses the agent token" in w for w in warned), good.stdout
    refused = [line for line in bad.stdout.splitlines() if "refuses the agent token" in line]
    assert {"claude", "codex"} == {r.split(" hooks reach ")[0].split()[-1] for r in refused}
    assert all("HTTP 401" in r for r in refused), refused
    assert good.returncode == bad.returncode == 0  # warnings, not failures
