"""The real Codex CLI (0.169.0) governed by a real `tachograph serve`, offline.

Hooks are installed by `tachograph hook install codex`; Codex, its scripted model
stand-in (openai_responses_standin.py), a policy handler and `serve` on SQLite all run in a
loopback-only network namespace (codex_run.py). The run's log is then read back through a
second `serve` on the same data directory, and `tachograph verify` checks its chain.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.agents import codex_run
from tests.support import free_port

ROOT = Path(__file__).resolve().parents[2]
SERVE_PORT = 18741  # inside the run's own network namespace: every port is free there


@pytest.fixture(scope="module")
def codex_binary() -> str:
    """The pinned CLI, installed (or found cached) by scripts/agent-clis: never skipped."""
    done = subprocess.run(
        [str(ROOT / "scripts" / "agent-clis"), "codex"],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    if done.returncode != 0:
        pytest.fail(f"scripts/agent-clis codex failed ({done.returncode}):\n{done.stderr}")
    return done.stdout.strip().splitlines()[-1]


def tool_env() -> dict[str, str]:
    """The environment of `tachograph` commands: the venv's own executables first."""
    bin_dir = str(Path(sys.executable).parent)
    return {**os.environ, "PATH": bin_dir + os.pathsep + os.environ.get("PATH", "")}


def tachograph(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cli.main", *args],
        env={**tool_env(), **(env or {})},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def run_codex(codex: str, work: Path, *, server_down: bool = False) -> dict[str, Any]:
    """One Codex run inside `unshare -n`, with Tachograph's hooks installed in its home."""
    installed = tachograph(
        "hook", "install", "codex", str(work / "home"), "--url", f"http://127.0.0.1:{SERVE_PORT}"
    )
    assert installed.returncode == 0, installed.stderr
    argv = [sys.executable, str(Path(codex_run.__file__)), "--work", str(work)]
    argv += ["--serve-port", str(SERVE_PORT), "--codex", codex]
    argv += ["--server-down"] if server_down else []
    done = subprocess.run(
        ["unshare", "-n", *argv],
        env=tool_env(),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report: dict[str, Any] = json.loads((work / "report.json").read_text())
    assert report["netns"] != os.readlink("/proc/self/ns/net")  # nothing left the machine
    assert report["exit"] == 0, report["stderr"]
    assert not report["standin_errors"]
    return report


@pytest.fixture(scope="module")
def governed_run(codex_binary: str, tmp_path_factory: pytest.TempPathFactory) -> Any:
    work = tmp_path_factory.mktemp("codex")
    report = run_codex(codex_binary, work)
    port = free_port()
    env = {
        **tool_env(),
        "TACHOGRAPH_DATA_DIR": str(work / "data"),
        "TACHOGRAPH_WORKSPACE_ROOT": str(work),
    }
    with open(work / "readback.log", "ab") as log:
        serve = subprocess.Popen(
            [sys.executable, "-m", "cli.main", "serve", "--port", str(port)],
            env=env,
            cwd=ROOT,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 30
        while True:
            try:
                httpx.get(base + "/api/health", timeout=1)
                break
            except httpx.HTTPError:
                assert time.monotonic() < deadline, (work / "readback.log").read_text()
                time.sleep(0.1)
        yield work, report, base, env
    finally:
        serve.terminate()
        serve.wait(20)


def codex_session(base: str) -> dict[str, Any]:
    sessions: list[dict[str, Any]] = httpx.get(base + "/api/sessions").json()["items"]
    (session,) = [s for s in sessions if s["agent"] == "codex"]
    return session


def test_the_policy_denies_a_command_and_codex_tells_the_model_why(governed_run: Any) -> None:
    _, report, _, _ = governed_run
    assert "DENIED.txt" not in report["files"]  # the denied command never ran
    later = [r for r in report["model_requests"] if codex_run.DENY_REASON in r]
    assert later, "the deny reason reached the model in a later request"


def test_a_rewritten_command_runs_in_place_of_the_original(governed_run: Any) -> None:
    _, report, _, _ = governed_run
    assert "REWRITTEN.txt" in report["files"] and "ORIGINAL.txt" not in report["files"]
    assert "hello.txt" in report["files"]  # apply_patch went through
    assert codex_run.FINAL_TEXT in report["stdout"]


def test_the_session_has_codexs_id_title_summary_and_status(governed_run: Any) -> None:
    work, _, base, _ = governed_run
    session = codex_session(base)
    (native,) = {
        json.loads(line)["payload"]["id"]
        for path in (work / "home" / ".codex" / "sessions").rglob("*.jsonl")
        for line in path.read_text().splitlines()[:1]
    }
    assert session["agentSessionId"] == native
    assert session["title"] == codex_run.PROMPT
    assert session["summary"] == codex_run.FINAL_TEXT
    assert session["status"] == "ended"


def test_the_audit_shows_each_hook_in_order_and_the_log_verifies(governed_run: Any) -> None:
    _, _, base, env = governed_run
    session = codex_session(base)
    items = httpx.get(f"{base}/api/sessions/{session['id']}/hooks").json()["items"]
    assert [(r["event"], r["outcome"]) for r in items] == [
        ("SessionStart", "pass"),
        ("UserPromptSubmit", "pass"),
        ("PreToolUse", "deny"),
        ("PreToolUse", "modify"),
        ("PostToolUse", "pass"),
        ("PreToolUse", "pass"),
        ("PostToolUse", "pass"),
        ("Stop", "pass"),
        ("SessionEnd", "pass"),
    ]
    verified = tachograph("verify", env=env)
    assert verified.returncode == 0, verified.stdout + verified.stderr


def test_the_timeline_shows_what_codex_tried_and_what_ran(governed_run: Any) -> None:
    _, _, base, _ = governed_run
    session = codex_session(base)
    (turn,) = httpx.get(f"{base}/api/sessions/{session['id']}/timeline").json()["items"]
    calls = [(c["tool"], c["summary"], c["decision"]) for c in turn["calls"]]
    assert calls == [
        ("Bash", codex_run.DENIED_COMMAND, "deny"),
        ("Bash", codex_run.REWRITTEN_COMMAND, "modify"),
        ("apply_patch", "hello.txt", "pass"),
    ]


def test_with_the_server_down_codex_still_completes_fast(codex_binary: str, tmp_path: Path) -> None:
    report = run_codex(codex_binary, tmp_path, server_down=True)
    assert "DENIED.txt" in report["files"]  # nothing governed it: fail-open, as documented
    assert codex_run.FINAL_TEXT in report["stdout"]
    assert report["seconds"] < 20
    failures = (tmp_path / "hook-client" / "hooks.log").read_text().splitlines()
    assert len(failures) >= 6  # each hook logged its failed delivery, none broke the run
