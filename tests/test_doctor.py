"""`tachograph doctor`: one line per check, non-zero exit on any failure, not on warnings."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from infra.settings import Settings
from tests.support import env_for

VENV_BIN = str(Path(sys.executable).parent)


def doctor(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cli.main", "doctor"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_healthy_setup_passes_every_check(settings: Settings, tmp_path: Path) -> None:
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
    ]
    assert result.returncode == 0, result.stdout
    assert all(line.startswith("ok") for line in lines)


@pytest.mark.parametrize("store_kind", ["sqlite"], indirect=True)
def test_each_problem_is_reported_and_fails(settings: Settings) -> None:
    settings.data_dir.mkdir(parents=True, exist_ok=True)
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
    home = tmp_path / "home"
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{sock.getsockname()[1]}"
    env = {**env_for(settings), "PATH": VENV_BIN + os.pathsep + "/usr/bin:/bin", "HOME": str(home)}
    for runtime in ("codex", "gemini", "copilot"):
        installed = subprocess.run(
            [sys.executable, "-m", "cli.main", "hook", "install", runtime, str(home)]
            + ["--url", dead],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
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
