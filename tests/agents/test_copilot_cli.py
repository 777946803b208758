"""The Copilot CLI adapter against the real Copilot CLI 1.0.102, offline (§6.5, issue 26).

copilot_driver.py runs inside `unshare -n` (loopback only): the model stand-in, a managed
PreToolUse policy handler (TACHOGRAPH_HOOKS), `tachograph serve` on SQLite and Copilot
CLI, with hooks installed by `tachograph hook install copilot <home>`, once with command
hooks, once with native HTTP hooks, once with serve stopped. This test then reads what
serve stored through the app and `tachograph verify`.
"""

from __future__ import annotations

import json
import os
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
from tests.agents.copilot_driver import DENY_REASON, FINAL_TEXT, MARKER, PROMPT

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
DRIVER = Path(__file__).with_name("copilot_driver.py")

# The audit of one run: the denied shell command has no permissionRequest/postToolUse; the
# rewritten one none either (modify answers permissionDecision "allow", which skips
# Copilot's approval); apply_patch asks permission (as `edit`).
EXPECTED_AUDIT = [
    ("SessionStart", "pass"),
    ("UserPromptSubmit", "pass"),
    ("PreToolUse", "deny"),
    ("PreToolUse", "modify"),
    ("PostToolUse", "pass"),
    ("PreToolUse", "pass"),
    ("PermissionRequest", "pass"),
    ("PostToolUse", "pass"),
    ("Stop", "pass"),
    ("SessionEnd", "pass"),
]


def copilot() -> str:
    """The pinned Copilot CLI (installed before entering the namespace); never skipped."""
    found = subprocess.run(
        [str(ROOT / "scripts" / "agent-clis"), "copilot"], capture_output=True, text=True
    )
    if found.returncode != 0:
        pytest.fail(f"scripts/agent-clis copilot failed:\n{found.stderr}")
    return found.stdout.strip().splitlines()[-1]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    binary = copilot()
    if subprocess.run(["unshare", "-n", "true"], capture_output=True).returncode != 0:
        pytest.fail("`unshare -n` does not work here: the Copilot CLI test needs it")
    work = tmp_path_factory.mktemp("copilot")
    script = 'ip link set lo up && exec "$@"'
    driven = subprocess.run(
        ["unshare", "-n", "sh", "-c", script, "sh", sys.executable, str(DRIVER), str(work), binary],
        capture_output=True,
        text=True,
        timeout=180,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    serve_log = (work / "serve.log").read_text() if (work / "serve.log").exists() else ""
    assert driven.returncode == 0, (driven.stdout, driven.stderr, serve_log[-3000:])
    results: dict[str, Any] = json.loads((work / "results.json").read_text())
    results["work"] = work
    return results


@pytest.fixture(scope="module")
def stored(runs: dict[str, Any]) -> Iterator[TestClient]:
    work: Path = runs["work"]
    settings = Settings(data_dir=work / "data", workspace_root=work / "workspaces")
    with TestClient(create_app(settings)) as client:
        yield client


def test_everything_ran_inside_a_loopback_only_namespace(runs: dict[str, Any]) -> None:
    assert runs["netns"] != os.readlink("/proc/self/ns/net")
    assert runs["errors"] == []


@pytest.mark.parametrize("mode", ["command", "http"])
def test_deny_and_modify_hold_and_the_model_hears_the_reason(
    runs: dict[str, Any], mode: str
) -> None:
    run = runs[mode]
    assert run["rc"] == 0, run["stderr"]
    assert FINAL_TEXT in run["stdout"]
    # Denied: the marker command never ran, and its reason reached the model.
    assert MARKER not in run["files"]
    assert any(f"Denied by preToolUse hook: {DENY_REASON}" in r for r in run["requests"][1:])
    # Rewritten: the replacement ran instead of the original.
    assert "original.txt" not in run["files"] and run["rewritten"] == "REWRITTEN\n"
    assert "hello.txt" in run["files"]
    entries = [e for entries in run["hook_file"]["hooks"].values() for e in entries]
    assert {e["type"] for e in entries} == {mode}


@pytest.mark.parametrize("mode", ["command", "http"])
def test_the_session_and_its_audit_are_recorded(
    runs: dict[str, Any], stored: TestClient, mode: str
) -> None:
    native = runs[mode]["native_session"]
    session_id = agent_session_uuid(f"copilot-cli:{native}")
    session = stored.get(f"/api/sessions/{session_id}").json()
    assert session["agent"] == "copilot-cli" and session["agentSessionId"] == native
    assert session["title"] == PROMPT and session["status"] == "ended"
    items = stored.get(f"/api/sessions/{session_id}/hooks").json()["items"]
    audit = [(i["event"], i["outcome"]) for i in items]
    # Copilot runs sessionStart's hook beside the first prompt's: those two may swap.
    assert sorted(audit[:2]) == sorted(EXPECTED_AUDIT[:2]), audit
    assert audit[2:] == EXPECTED_AUDIT[2:], audit
    (denied,) = [i for i in items if i["outcome"] == "deny"]
    assert denied["handlerId"] == "shell-policy" and denied["reason"] == DENY_REASON


def test_the_log_verifies(runs: dict[str, Any]) -> None:
    work: Path = runs["work"]
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "TACHOGRAPH_DATA_DIR": str(work / "data"),
        "TACHOGRAPH_WORKSPACE_ROOT": str(work / "workspaces"),
    }
    verified = subprocess.run(
        [sys.executable, "-m", "cli.main", "verify"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert verified.returncode == 0, verified.stdout + verified.stderr


def test_with_the_server_down_the_agent_still_completes_fast(runs: dict[str, Any]) -> None:
    down = runs["down"]
    assert down["rc"] == 0, down["stderr"]
    assert FINAL_TEXT in down["stdout"]
    # Fail open: nothing gated the commands, so they ran as the model asked.
    assert {MARKER, "original.txt", "hello.txt"} <= set(down["files"])
    assert down["elapsed"] < 15, down["elapsed"]
    assert down["elapsed"] < runs["command"]["elapsed"] + 5
