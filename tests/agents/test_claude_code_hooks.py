"""The real Claude Code CLI (2.1.328) governed through `tachograph hook install claude`, offline.

`scripts/agent-clis claude` installs the pinned CLI (network only when it is not cached:
never skipped, a missing CLI fails). claude_run.py runs inside `unshare -n` with loopback
only: a managed policy handler (TACHOGRAPH_HOOKS), `tachograph serve` on SQLite, the
scripted Messages API stand-in (anthropic_standin.py) and `claude -p`, three times: with
command hooks, with native HTTP hooks (`--http`), and with command hooks and serve
stopped. Claude Code holds an agent token from `tachograph keys issue`, never the admin
key. This test then reads what serve stored through the app and `tachograph verify`.
"""

from __future__ import annotations

import json
import os
import re
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
from tests.agents import claude_run
from tests.agents.anthropic_standin import is_agent_loop, text_of, tool_results

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
DRIVER = Path(claude_run.__file__)
MODES = ["command", "http"]

# What one governed run records, in arrival order (the same in both modes: SessionStart
# stays a command hook with --http). The denied call gets no PostToolUse, yet its batch
# gets a PostToolBatch; PostToolBatch and MessageDisplay are observational (no handler).
EXPECTED_AUDIT = [
    ("SessionStart", "start-context", "pass"),
    ("UserPromptSubmit", "prompt-context", "pass"),
    ("PreToolUse", "shell-policy", "deny"),
    ("PostToolBatch", None, "pass"),
    ("PreToolUse", "shell-policy", "modify"),
    ("PostToolUse", None, "pass"),
    ("PostToolBatch", None, "pass"),
    ("PreToolUse", "shell-policy", "pass"),  # env
    ("PostToolUse", None, "pass"),
    ("PostToolBatch", None, "pass"),
    ("MessageDisplay", None, "pass"),
    ("Stop", None, "pass"),
    ("SessionEnd", None, "pass"),
]


@pytest.fixture(scope="module")
def claude() -> str:
    """The pinned CLI, installed (or found cached) by scripts/agent-clis: never skipped."""
    try:
        done = subprocess.run(
            [str(ROOT / "scripts" / "agent-clis"), "claude"],
            capture_output=True,
            text=True,
            timeout=600,
        )
    except subprocess.TimeoutExpired:
        pytest.fail("scripts/agent-clis did not finish installing Claude Code within 10 min")
    if done.returncode != 0:
        pytest.fail(f"scripts/agent-clis claude failed ({done.returncode}):\n{done.stderr}")
    binary = done.stdout.strip().splitlines()[-1]
    version = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=60)
    assert version.stdout.startswith("2.1.328 "), version
    return binary


@pytest.fixture(scope="module")
def runs(claude: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    if subprocess.run(["unshare", "-n", "true"], capture_output=True).returncode != 0:
        pytest.fail("`unshare -n` does not work here: the real-CLI test runs only offline")
    work = tmp_path_factory.mktemp("claude")
    script = 'ip link set lo up && exec "$@"'
    inner = [sys.executable, str(DRIVER), "--work", str(work), "--claude", claude]
    driven = subprocess.run(
        ["unshare", "-n", "sh", "-c", script, "sh", *inner],
        cwd=ROOT,
        env=dict(os.environ),
        capture_output=True,
        text=True,
        timeout=240,
    )
    serve_log = (work / "serve.log").read_text() if (work / "serve.log").exists() else ""
    assert driven.returncode == 0, (driven.stdout, driven.stderr[-4000:], serve_log[-3000:])
    report: dict[str, Any] = json.loads((work / "report.json").read_text())
    report["work"] = work
    return report


@pytest.fixture(scope="module")
def stored(runs: dict[str, Any]) -> Iterator[TestClient]:
    work: Path = runs["work"]
    settings = Settings(
        data_dir=work / "data", workspace_root=work / "workspace", api_key=claude_run.ADMIN_KEY
    )
    admin = {"x-tachograph-key": claude_run.ADMIN_KEY}
    with TestClient(create_app(settings), headers=admin) as client:
        yield client


def agent_requests(run: dict[str, Any]) -> list[dict[str, Any]]:
    return [body for body in run["model_requests"] if is_agent_loop(body)]


def completed(run: dict[str, Any]) -> dict[str, Any]:
    """Claude Code's `--output-format json` result of a run that finished normally."""
    assert run["exit"] == 0, run["stderr"]
    result: dict[str, Any] = json.loads(run["stdout"])
    assert result["subtype"] == "success" and result["is_error"] is False, result
    assert result["result"] == claude_run.FINAL_TEXT
    return result


def test_everything_ran_offline_with_only_the_agent_token(runs: dict[str, Any]) -> None:
    assert runs["netns"] != os.readlink("/proc/self/ns/net")
    assert runs["standin_errors"] == []
    for mode in [*MODES, "down"]:
        run = runs[mode]
        assert {p.split("?")[0] for p in run["model_paths"]} == {"POST /v1/messages"}, run
        assert "TACHOGRAPH_AGENT_TOKEN" in run["agent_env"]
        assert "TACHOGRAPH_API_KEY" not in run["agent_env"]
    for mode in MODES:
        # What `env` printed inside Claude Code's Bash tool, as the model was shown it.
        shown = text_of(tool_results(agent_requests(runs[mode])[-1])[-1])
        names = {line.split("=", 1)[0] for line in shown.splitlines() if "=" in line}
        assert {"TACHOGRAPH_AGENT_TOKEN", "CLAUDE_CODE_SESSION_ID"} <= names, shown
        assert "TACHOGRAPH_API_KEY" not in names
        assert claude_run.ADMIN_KEY not in json.dumps(runs[mode]["model_requests"])


@pytest.mark.parametrize("mode", MODES)
def test_the_installed_hooks_are_of_the_mode_asked_for(runs: dict[str, Any], mode: str) -> None:
    hooks = runs[mode]["settings"]["hooks"]
    types = {
        event: [entry["type"] for group in groups for entry in group["hooks"]]
        for event, groups in hooks.items()
    }
    # Claude Code runs no HTTP hook on SessionStart: the installer keeps a command there.
    assert types.pop("SessionStart") == ["command"]
    assert {"PreToolUse", "PostToolBatch", "MessageDisplay", "SessionEnd"} <= set(types)
    assert all(kinds == [mode] for kinds in types.values()), types


@pytest.mark.parametrize("mode", MODES)
def test_the_policy_denies_a_command_and_the_model_hears_why(
    runs: dict[str, Any], mode: str
) -> None:
    run = runs[mode]
    result = completed(run)
    assert "DENIED.txt" not in run["files"]  # the denied command never ran
    (denial,) = result["permission_denials"]
    assert denial["tool_input"]["command"] == claude_run.DENIED_COMMAND
    # The next request carries the refusal as the tool's error result, reason included.
    requests = agent_requests(run)
    (refused,) = tool_results(requests[1])
    assert refused.get("is_error") is True, refused
    assert text_of(refused) == f"PreToolUse:Bash hook error: {claude_run.DENY_REASON}"
    assert not any(claude_run.DENY_REASON in json.dumps(r) for r in requests[:1])


@pytest.mark.parametrize("mode", MODES)
def test_a_rewritten_command_runs_in_place_of_the_original(runs: dict[str, Any], mode: str) -> None:
    run = runs[mode]
    completed(run)
    project: Path = runs["work"] / mode / "project"
    assert "ORIGINAL.txt" not in run["files"]
    assert (project / "REWRITTEN.txt").read_text() == "rewritten\n"
    ran = tool_results(agent_requests(run)[2])[1]
    assert ran.get("is_error") is not True, ran


@pytest.mark.parametrize("mode", MODES)
def test_handlers_context_reaches_the_model_from_the_first_request(
    runs: dict[str, Any], mode: str
) -> None:
    first = json.dumps(agent_requests(runs[mode])[0]["messages"])
    assert f"SessionStart hook additional context: {claude_run.START_CONTEXT}" in first
    assert f"UserPromptSubmit hook additional context: {claude_run.PROMPT_CONTEXT}" in first


@pytest.mark.parametrize("mode", MODES)
def test_the_session_has_claudes_id_title_summary_and_status(
    runs: dict[str, Any], stored: TestClient, mode: str
) -> None:
    run = runs[mode]
    native = completed(run)["session_id"]
    assert run["native_session"] == native and re.fullmatch(r"[0-9a-f-]{36}", native)
    assert run["transcripts"] == [native]  # Claude Code's own transcript has the same id
    listed = stored.get("/api/sessions", params={"limit": 50}).json()["items"]
    (session,) = [s for s in listed if s.get("agentSessionId") == native]
    assert session["id"] == str(agent_session_uuid(f"claude-code:{native}"))
    assert session["agent"] == "claude-code"
    assert session["title"] == claude_run.PROMPT
    assert session["summary"] == claude_run.FINAL_TEXT
    assert session["status"] == "ended"
    assert session["workspaceId"] == "default"
    assert len([s for s in listed if s.get("agent") == "claude-code"]) == len(MODES)


@pytest.mark.parametrize("mode", MODES)
def test_the_audit_shows_each_hook_in_order(
    runs: dict[str, Any], stored: TestClient, mode: str
) -> None:
    session_id = agent_session_uuid(f"claude-code:{runs[mode]['native_session']}")
    items = stored.get(f"/api/sessions/{session_id}/hooks").json()["items"]
    assert [(i["event"], i["handlerId"], i["outcome"]) for i in items] == EXPECTED_AUDIT
    # Every hook was delivered: the hook client logged no failure.
    assert not (runs["work"] / mode / "hook-client" / "hooks.log").exists()
    (denied,) = [i for i in items if i["outcome"] == "deny"]
    assert denied["reason"] == claude_run.DENY_REASON and denied["failure"] is None
    timeline = stored.get(f"/api/sessions/{session_id}/timeline").json()["items"]
    (turn,) = timeline
    assert [(c["tool"], c["summary"], c["decision"], c["status"]) for c in turn["calls"]] == [
        ("Bash", claude_run.DENIED_COMMAND, "deny", "denied"),
        ("Bash", claude_run.REWRITTEN["command"], "modify", "ok"),
        ("Bash", claude_run.ENV_COMMAND, "pass", "ok"),
    ]


def test_the_policy_saw_each_call_before_it_ran(runs: dict[str, Any]) -> None:
    calls = [(path, body["event"]) for path, body in runs["handler_calls"]]
    one_run = [("/start", "SessionStart"), ("/prompt", "UserPromptSubmit")]
    one_run += [("/policy", "PreToolUse")] * 3
    assert calls == one_run * len(MODES)  # and nothing from the run with serve down
    commands = [b["detail"]["toolInput"]["command"] for p, b in runs["handler_calls"][2:5]]
    assert commands == [
        claude_run.DENIED_COMMAND,
        claude_run.ORIGINAL_COMMAND,
        claude_run.ENV_COMMAND,
    ]


def test_the_log_verifies(runs: dict[str, Any]) -> None:
    work: Path = runs["work"]
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "TACHOGRAPH_DATA_DIR": str(work / "data"),
        "TACHOGRAPH_WORKSPACE_ROOT": str(work / "workspace"),
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


def test_with_the_server_down_claude_code_still_completes_fast(runs: dict[str, Any]) -> None:
    down = runs["down"]
    completed(down)
    # Fail open: nothing gated the commands, so they ran as the model asked.
    assert {"DENIED.txt", "ORIGINAL.txt"} <= set(down["files"])
    assert "REWRITTEN.txt" not in down["files"]
    # Each hook gave up at once (connection refused): the run keeps the CLI's own pace.
    assert down["seconds"] < 20, down["seconds"]
    assert down["seconds"] < runs["command"]["seconds"] + 5, (down, runs["command"]["seconds"])
    log = runs["work"] / "down" / "hook-client" / "hooks.log"
    failures = [json.loads(line) for line in log.read_text().splitlines()]
    events = [f["event"] for f in failures]
    assert events[:3] == ["SessionStart", "UserPromptSubmit", "PreToolUse"], events
    assert events.count("PreToolUse") == 3 and "Stop" in events, events
    assert all("Connection refused" in f["error"] for f in failures), failures
