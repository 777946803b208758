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
from tests.hook_server import HookServer
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


def doctor(env: dict[str, str], *projects: Path) -> subprocess.CompletedProcess[str]:
    return tachograph(["doctor", *map(str, projects)], env)


def check_lines(result: subprocess.CompletedProcess[str], name: str) -> list[str]:
    return [line for line in result.stdout.splitlines() if line[5:].startswith(f"{name}:")]


def relay(env: dict[str, str], cwd: Path) -> None:
    """One Claude Code PreToolUse through the command hook, as the runtime would run it."""
    payload = json.dumps({"hook_event_name": "PreToolUse", "session_id": "s", "tool_name": "Bash"})
    done = subprocess.run(
        [sys.executable, "-m", "cli.main", "hook", "claude", "PreToolUse"],
        input=payload,
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (done.returncode, done.stdout.strip() in ("", "{}")) == (0, True), done


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
        "executor",
        "path",
        "credentials",
        "runtimes",
        "holds",
        "hooks.log",
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
    # No `tachograph` on PATH is no failure: installed hooks run the client by its path.
    assert failed == {"hooks.log", "executor"}
    assert "1 other failure and no success since the log began" in result.stdout
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
    for runtime in ("codex", "gemini", "copilot", "qwen", "droid", "opencode", "kilo"):
        installed = tachograph(["hook", "install", runtime, str(home), "--url", dead], env)
        assert installed.returncode == 0, installed.stderr
    hooks_file = home / ".codex" / "hooks.json"
    hooks_file.write_text(hooks_file.read_text().replace(sys.executable, "/no/such/python"))
    result = doctor(env)
    warned = [line for line in result.stdout.splitlines() if line.startswith("WARN runtimes:")]
    for runtime in ("gemini", "copilot", "qwen", "droid", "opencode", "kilo"):
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


@pytest.mark.parametrize("store_kind", ["sqlite"], indirect=True)
def test_doctor_reads_the_log_the_hook_writes_and_counts_failures_since_a_success(
    settings: Settings, tmp_path: Path
) -> None:
    build_services(settings).close()
    home, project = tmp_path / "home", tmp_path / "project"
    project.mkdir()
    env = {**env_for(settings), "PATH": VENV_BIN + os.pathsep + "/usr/bin:/bin", "HOME": str(home)}
    del env["TACHOGRAPH_HOOK_LOG"]  # the default: the user's state directory
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{sock.getsockname()[1]}"
    for _ in range(3):
        relay({**env, "TACHOGRAPH_URL": dead}, project)
    assert list(project.iterdir()) == []  # nothing written where the agent works
    log = home / ".local" / "state" / "tachograph" / "hooks.log"
    last_at = json.loads(log.read_text().splitlines()[-1])["at"]

    [failing] = check_lines(doctor(env), "hooks.log")
    assert failing.startswith("FAIL hooks.log: 3 refused connections and no success since")
    assert f"last at {last_at}" in failing and str(log) in failing

    server = HookServer()
    server.routes["/hooks/claude"] = lambda _: (200, {})
    try:
        relay({**env, "TACHOGRAPH_URL": server.url}, project)
        relay({**env, "TACHOGRAPH_URL": server.url}, project)  # one success line, not two
        relay({**env, "TACHOGRAPH_URL": dead}, project)
        [again] = check_lines(doctor(env), "hooks.log")
        assert again.startswith("FAIL hooks.log: 1 refused connection since the last success")
        relay({**env, "TACHOGRAPH_URL": server.url}, project)
    finally:
        server.close()
    assert [json.loads(line).get("ok") for line in log.read_text().splitlines()] == [
        None,
        None,
        None,
        True,
        None,
        True,
    ]
    [healthy] = check_lines(doctor(env), "hooks.log")
    assert healthy.startswith("ok   hooks.log: no delivery failures since the last success")


@pytest.mark.parametrize("store_kind", ["sqlite"], indirect=True)
def test_named_project_directories_are_checked_for_installed_hooks(
    settings: Settings, tmp_path: Path
) -> None:
    build_services(settings).close()
    home, project, bare = tmp_path / "home", tmp_path / "project", tmp_path / "bare"
    bare.mkdir()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{sock.getsockname()[1]}"
    env = {**env_for(settings), "PATH": "/usr/bin:/bin", "HOME": str(home)}
    installed = tachograph(["hook", "install", "claude", str(project), "--url", dead], env)
    assert installed.returncode == 0, installed.stderr
    (project / "data").mkdir()
    (project / "data" / "hooks.log").write_text('{"error": "from an earlier release"}\n')

    unnamed = doctor(env)
    assert "project" not in "".join(check_lines(unnamed, "runtimes"))

    named = doctor(env, project, bare)
    runtimes = check_lines(named, "runtimes")
    claude_file = project / ".claude" / "settings.local.json"
    assert any(
        f"{claude_file}: claude hooks reach {dead}, which does not answer" in w for w in runtimes
    )
    assert any(w.startswith(f"WARN runtimes: no Tachograph hooks in {bare}") for w in runtimes)
    # The installed hooks run this installation's client by path: no PATH failure.
    assert not [line for line in named.stdout.splitlines() if line.startswith("FAIL")]
    [earlier] = check_lines(named, "hooks.log")
    assert earlier.startswith(f"WARN hooks.log: {project / 'data' / 'hooks.log'} was written")
    assert named.returncode == 0

    missing = doctor(env, tmp_path / "nowhere")
    assert check_lines(missing, "runtimes") == [
        f"FAIL runtimes: not a directory: {tmp_path / 'nowhere'}"
    ]
    assert missing.returncode == 1
