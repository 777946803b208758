"""Installed hooks wait longer than the longest hold of the server they report to.

`GET /api/health` names the hold (`longestHoldS`); `tachograph hook install` reads it and
writes the runtime's timeout (hold + 20 s) and the hook client's own wait (hold + 15 s)
on the events a call can be held on, for every runtime, command and HTTP hooks; with the
server unreachable it assumes the longest hold a rule may set and says so. `doctor`
fails, and `serve` warns at start-up, when an installed hook waits less than a hold.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from bootstrap import build_services
from infra.settings import Settings
from tests.support import Server, admin_client, env_for

pytestmark = [pytest.mark.slow, pytest.mark.parametrize("store_kind", ["sqlite"], indirect=True)]

ADMIN_KEY = "hook-waits-admin-key"
HOLD_S = 90
RULES = {
    "version": 1,
    "rules": [
        {"id": "push", "tool": "Bash", "match": "git push", "timeoutS": 30},
        {"id": "deploy", "tool": "Bash", "match": "deploy", "timeoutS": HOLD_S},
    ],
}
ENV = {"TACHOGRAPH_APPROVALS": json.dumps(RULES)}
REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def serve(settings: Settings, tmp_path: Path) -> Iterator[httpx.Client]:
    with admin_client(settings, tmp_path / "serve.log", ENV, ADMIN_KEY) as client:
        yield client


def tachograph(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cli.main", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
    )


def install(runtime: str, directory: Path, url: str, *flags: str) -> dict[str, Any]:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "TACHOGRAPH_API_KEY": ADMIN_KEY}
    done = tachograph("hook", "install", runtime, str(directory), "--url", url, *flags, env=env)
    assert done.returncode == 0, done.stderr
    return {"stderr": done.stderr}


def handlers(path: Path, event: str) -> list[dict[str, Any]]:
    hooks = json.loads(path.read_text())["hooks"][event]
    return [h for group in hooks for h in group.get("hooks", [group])]


def test_health_names_the_longest_hold(serve: httpx.Client) -> None:
    assert serve.get("/api/health").json()["longestHoldS"] == HOLD_S


def test_an_active_policys_ask_rule_counts_in_the_hold(serve: httpx.Client) -> None:
    asks = (
        "version: 1\nrules:\n  - {id: slow, when: 'tool == \"Bash\"', then: ask, timeoutS: %d%s}\n"
    )
    held = serve.post("/api/policy/revisions", json={"source": asks % (300, "")}).json()
    shadow = serve.post("/api/policy/revisions", json={"source": asks % (500, ", mode: shadow")})
    assert serve.get("/api/health").json()["longestHoldS"] == HOLD_S  # recorded, not active
    assert serve.post(f"/api/policy/revisions/{shadow.json()['id']}/activate").status_code == 200
    assert serve.get("/api/health").json()["longestHoldS"] == HOLD_S  # a shadow rule holds nothing
    assert serve.post(f"/api/policy/revisions/{held['id']}/activate").status_code == 200
    assert serve.get("/api/health").json()["longestHoldS"] == 300
    assert serve.post("/api/policy/remove", json={}).status_code == 200
    assert serve.get("/api/health").json()["longestHoldS"] == HOLD_S


def test_install_writes_waits_longer_than_the_hold_for_every_runtime(
    serve: httpx.Client, tmp_path: Path
) -> None:
    url = str(serve.base_url)
    runtime_s, client_s = HOLD_S + 20, HOLD_S + 15
    pin = f"TACHOGRAPH_HOOK_TIMEOUT_S={client_s} "

    install("claude", tmp_path / "claude", url)
    claude = tmp_path / "claude" / ".claude" / "settings.local.json"
    for event in ("PreToolUse", "PermissionRequest"):
        (entry,) = handlers(claude, event)
        assert entry["timeout"] == runtime_s and pin in entry["command"]
    (prompt,) = handlers(claude, "UserPromptSubmit")
    assert "TACHOGRAPH_HOOK_TIMEOUT_S" not in prompt["command"]  # nothing holds a prompt

    install("claude", tmp_path / "claude-http", url, "--http")
    (entry,) = handlers(tmp_path / "claude-http" / ".claude" / "settings.local.json", "PreToolUse")
    assert entry["type"] == "http" and entry["timeout"] == runtime_s

    install("codex", tmp_path / "codex", url)
    (entry,) = handlers(tmp_path / "codex" / ".codex" / "hooks.json", "PreToolUse")
    assert entry["timeout"] == runtime_s and pin in entry["command"]

    install("gemini", tmp_path / "gemini", url)
    (entry,) = handlers(tmp_path / "gemini" / ".gemini" / "settings.json", "BeforeTool")
    assert entry["timeout"] == runtime_s * 1000 and pin in entry["command"]

    for flags in ((), ("--http",)):
        home = tmp_path / f"copilot{len(flags)}"
        install("copilot", home, url, *flags)
        (entry,) = handlers(home / ".copilot" / "hooks" / "tachograph.json", "preToolUse")
        assert entry["timeoutSec"] == runtime_s
        assert flags or pin in entry["bash"]


def test_install_without_a_server_waits_for_the_longest_possible_hold(
    settings: Settings, tmp_path: Path
) -> None:
    assert settings.approvals.rules == ()  # no server runs here to ask
    done = install("claude", tmp_path, "http://127.0.0.1:9")
    assert "could not read longestHoldS" in done["stderr"]
    (entry,) = handlers(tmp_path / ".claude" / "settings.local.json", "PreToolUse")
    assert entry["timeout"] == 620
    assert "TACHOGRAPH_HOOK_TIMEOUT_S=615 " in entry["command"]


def short_hook(project: Path) -> None:
    """A Claude Code command hook as earlier releases wrote it: the client's 10 s."""
    path = project / ".claude" / "settings.local.json"
    path.parent.mkdir(parents=True)
    command = f"TACHOGRAPH_URL=http://127.0.0.1:8000 {sys.executable} -S {REPO}/hook_client/command.py claude PreToolUse"  # noqa: E501
    hooks = {"PreToolUse": [{"matcher": "*", "hooks": [{"type": "command", "command": command}]}]}
    path.write_text(json.dumps({"hooks": hooks}))


def doctor_env(settings: Settings, home: Path) -> dict[str, str]:
    return {**env_for(settings.with_(api_key=ADMIN_KEY)), **ENV, "HOME": str(home)}


def test_doctor_fails_on_a_hook_shorter_than_the_hold_and_passes_once_reinstalled(
    settings: Settings, serve: httpx.Client, tmp_path: Path
) -> None:
    build_services(settings).close()
    project = settings.workspace_root / "repo"
    short_hook(project)
    failed = tachograph("doctor", env=doctor_env(settings, tmp_path / "home"))
    assert failed.returncode == 1, failed.stdout
    line = next(x for x in failed.stdout.splitlines() if x.split()[1] == "holds:")
    assert line.startswith("FAIL holds:")
    assert "PreToolUse (command hook) waits 10 s" in line and f"held {HOLD_S} s" in line

    install("claude", project, str(serve.base_url))
    passed = tachograph("doctor", env=doctor_env(settings, tmp_path / "home"))
    assert f"ok   holds: installed hooks wait longer than the longest hold ({HOLD_S} s)" in (
        passed.stdout
    )


def test_serve_warns_at_start_up_of_a_hook_shorter_than_the_hold(
    settings: Settings, tmp_path: Path
) -> None:
    short_hook(settings.workspace_root / "repo")
    server = Server(settings.with_(api_key=ADMIN_KEY), tmp_path / "serve.log", ENV)
    try:
        server.wait_ready(headers={"x-tachograph-key": ADMIN_KEY})
        output = server.output()
    finally:
        server.kill()
    assert "hook waits too little" in output
    assert "PreToolUse (command hook) waits 10 s" in output
