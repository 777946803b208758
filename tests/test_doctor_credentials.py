"""`tachograph doctor` credentials check: warns where the admin key reaches agents."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from bootstrap import build_services
from infra.settings import Settings

VENV_BIN = str(Path(sys.executable).parent)
ADMIN_KEY = "adm-7f3c9a1e5b2d-doctor"
AGENT_TOKEN_HINT = "tachograph keys issue --role agent --session ID"


def previous_release_hook(**overrides: Any) -> dict[str, Any]:
    """A `--http` hook as the release before agent tokens wrote it."""
    entry = {
        "type": "http",
        "url": "http://127.0.0.1:8000/hooks/claude",
        "headers": {
            "x-tachograph-key": "$TACHOGRAPH_API_KEY",
            "x-tachograph-session-id": "$TACHOGRAPH_SESSION_ID",
            "x-tachograph-workspace": "$TACHOGRAPH_WORKSPACE",
        },
        "allowedEnvVars": ["TACHOGRAPH_API_KEY", "TACHOGRAPH_SESSION_ID", "TACHOGRAPH_WORKSPACE"],
    }
    return {**entry, **overrides}


def hooks_file(*handlers: dict[str, Any]) -> dict[str, Any]:
    return {"hooks": {"PreToolUse": [{"matcher": "*", "hooks": list(handlers)}]}}


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    """A healthy setup guarded by the admin key, with an empty workspace root and home."""
    (tmp_path / "workspace").mkdir()
    (tmp_path / "home").mkdir()
    # The server has run here: doctor checks an existing log and creates none.
    build_services(Settings(data_dir=tmp_path / "data", workspace_root=tmp_path)).close()
    return {
        "PATH": VENV_BIN + os.pathsep + "/usr/bin:/bin",
        "HOME": str(tmp_path / "home"),
        "TACHOGRAPH_DATA_DIR": str(tmp_path / "data"),
        "TACHOGRAPH_WORKSPACE_ROOT": str(tmp_path / "workspace"),
        "TACHOGRAPH_API_KEY": ADMIN_KEY,
    }


def write_json(path: Path, data: object) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2), encoding="utf-8")
    return path


def run(argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cli.main", *argv],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def credentials(env: dict[str, str]) -> tuple[int, list[str]]:
    """Run doctor; return its exit code and its credentials lines."""
    result = run(["doctor"], env)
    key = env.get("TACHOGRAPH_API_KEY")
    if key:
        assert key not in result.stdout + result.stderr
    lines = [line for line in result.stdout.splitlines() if line[5:].startswith("credentials:")]
    return result.returncode, lines


def test_a_guarded_api_without_copies_of_the_key_is_ok(env: dict[str, str]) -> None:
    root, home = Path(env["TACHOGRAPH_WORKSPACE_ROOT"]), Path(env["HOME"])
    assert run(["hook", "install", "claude", str(root / "proj"), "--http"], env).returncode == 0
    write_json(home / ".claude" / "settings.json", {"permissions": {"allow": ["Bash(ls)"]}})

    code, lines = credentials(env)

    assert code == 0
    [line] = lines
    assert line.startswith("ok   credentials: admin key not handed to agents")
    assert "2 Claude Code settings file(s)" in line


def test_an_unset_admin_key_warns_once_that_the_api_is_open(env: dict[str, str]) -> None:
    del env["TACHOGRAPH_API_KEY"]

    code, lines = credentials(env)

    [line] = lines
    assert line.startswith("WARN credentials: TACHOGRAPH_API_KEY is unset")
    assert "API is open" in line
    assert "including governed agents, can call every route" in line
    # Warnings are advice, like the other non-fatal findings: they keep the exit code 0.
    assert code == 0


def test_the_admin_key_in_the_task_command_warns(env: dict[str, str]) -> None:
    argv = [sys.executable, "-c", "pass", f"--api-key={ADMIN_KEY}"]
    env["TACHOGRAPH_TASK_COMMAND"] = json.dumps(argv)

    code, lines = credentials(env)

    [line] = lines
    assert line.startswith("WARN credentials: TACHOGRAPH_TASK_COMMAND[3] contains the admin key")
    assert AGENT_TOKEN_HINT in line
    assert code == 0


@pytest.mark.parametrize("name", ["TACHOGRAPH_AGENT_TOKEN", "ANTHROPIC_API_KEY", "PGPASSWORD"])
def test_a_copy_of_the_admin_key_in_the_environment_warns(env: dict[str, str], name: str) -> None:
    env[name] = ADMIN_KEY

    _, lines = credentials(env)

    [line] = lines
    assert line.startswith(f"WARN credentials: {name} holds a copy of the admin key")
    assert AGENT_TOKEN_HINT in line


@pytest.mark.parametrize("project", [".", "proj"])
@pytest.mark.parametrize("name", ["settings.local.json", "settings.json"])
def test_previous_release_hooks_in_a_workspace_warn_naming_the_file(
    env: dict[str, str], project: str, name: str
) -> None:
    root = Path(env["TACHOGRAPH_WORKSPACE_ROOT"])
    path = write_json(root / project / ".claude" / name, hooks_file(previous_release_hook()))

    _, lines = credentials(env)

    [line] = lines
    assert line.startswith(f"WARN credentials: {path} has 1 Tachograph hook(s)")
    assert "send TACHOGRAPH_API_KEY" in line
    assert "tachograph hook install claude" in line
    assert AGENT_TOKEN_HINT in line


@pytest.mark.parametrize(
    "hook",
    [
        previous_release_hook(allowedEnvVars=["TACHOGRAPH_SESSION_ID"]),
        previous_release_hook(
            headers={"x-tachograph-key": "${TACHOGRAPH_API_KEY}"}, allowedEnvVars=[]
        ),
        previous_release_hook(headers={}),
    ],
    ids=["header", "braced-header", "allowed-env-var"],
)
def test_every_form_of_admin_key_reference_in_own_hooks_warns(
    env: dict[str, str], hook: dict[str, Any]
) -> None:
    home = Path(env["HOME"])
    del env["TACHOGRAPH_API_KEY"]  # the reference itself is the finding, set key or not
    path = write_json(home / ".claude" / "settings.json", hooks_file(hook))

    _, lines = credentials(env)

    assert len(lines) == 2
    assert lines[1].startswith(f"WARN credentials: {path} has 1 Tachograph hook(s)")


def test_similar_names_are_not_a_reference(env: dict[str, str]) -> None:
    hook = previous_release_hook(
        headers={"x-tachograph-key": "$TACHOGRAPH_API_KEY_FILE"},
        allowedEnvVars=["TACHOGRAPH_API_KEYS"],
    )
    write_json(
        Path(env["TACHOGRAPH_WORKSPACE_ROOT"]) / ".claude" / "settings.json", hooks_file(hook)
    )

    _, lines = credentials(env)

    [line] = lines
    assert line.startswith("ok   credentials:")


def test_reinstalling_replaces_previous_release_hooks_and_clears_the_warning(
    env: dict[str, str],
) -> None:
    project = Path(env["TACHOGRAPH_WORKSPACE_ROOT"]) / "proj"
    path = write_json(
        project / ".claude" / "settings.local.json", hooks_file(previous_release_hook())
    )
    _, before = credentials(env)
    assert before[0].startswith(f"WARN credentials: {path}")
    assert f"re-run `tachograph hook install claude {project}`" in before[0]

    assert run(["hook", "install", "claude", str(project), "--http"], env).returncode == 0

    _, after = credentials(env)
    assert after[0].startswith("ok   credentials:")


@pytest.mark.parametrize(
    ("where", "key"),
    [
        ("workspace/.claude/settings.json", ADMIN_KEY),
        ("workspace/proj/.claude/settings.local.json", ADMIN_KEY),
        ("home/.claude/settings.json", ADMIN_KEY),
        ("home/.claude/settings.json", 'adm"in\\key-with-escapes'),
    ],
)
def test_the_admin_key_written_into_a_settings_file_warns(
    env: dict[str, str], tmp_path: Path, where: str, key: str
) -> None:
    env["TACHOGRAPH_API_KEY"] = key
    path = write_json(tmp_path / where, {"env": {"TACHOGRAPH_AGENT_TOKEN": key}})

    _, lines = credentials(env)

    [line] = lines
    assert line.startswith(f"WARN credentials: {path} contains the admin key")
    assert AGENT_TOKEN_HINT in line


def test_each_finding_gets_its_own_line(env: dict[str, str]) -> None:
    root = Path(env["TACHOGRAPH_WORKSPACE_ROOT"])
    env["ANTHROPIC_API_KEY"] = ADMIN_KEY
    first = write_json(root / "a" / ".claude" / "settings.local.json", {"env": {"K": ADMIN_KEY}})
    second = write_json(
        root / "b" / ".claude" / "settings.local.json",
        hooks_file(previous_release_hook(), previous_release_hook()),
    )

    code, lines = credentials(env)

    assert [line.split(":")[0] for line in lines] == ["WARN credentials"] * 3
    assert str(first) in lines[1]
    assert f"{second} has 2 Tachograph hook(s)" in lines[2]
    assert code == 0
