"""The Cline adapter with the real Cline CLI 3.0.65, offline, against `tachograph serve`.

`scripts/agent-clis cline` installs the pinned CLI (network only when it is not cached:
never skipped, a missing CLI fails). Each run happens inside `unshare -n` with loopback
only: tests/agents/cline_run.py starts the managed handlers, `tachograph serve` on
SQLite, the scripted Chat Completions stand-in and `cline --json` there, with the hooks
installed by `tachograph hook install cline <HOME>` beside a hook file of the user's
own. Afterwards the test reads the data dir through the app. Every run's detached
`--cline-hub-daemon` is killed, whether the run passed or not.
"""

from __future__ import annotations

import json
import re
import shlex
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from domain.lifecycle import agent_session_uuid
from tests.agents import cline_run, harness
from tests.agents.cline_run import (
    DENY_REASON,
    FINAL_TEXT,
    OPERATOR_WAIT_S,
    TOOL_CONTEXT,
    USER_HOOK,
)

pytestmark = pytest.mark.slow

DRIVER = Path(cline_run.__file__)


@pytest.fixture(scope="module")
def cline() -> str:
    return harness.agent_cli("cline")


@pytest.fixture
def work(tmp_path: Path) -> Iterator[Path]:
    """The run's folder; no hub daemon of its HOME outlives the test."""
    yield tmp_path
    cline_run.stop_hub_daemons(tmp_path / "home")


def run_cline(cline: str, work: Path, *extra: str) -> dict[str, Any]:
    report = harness.run_driver(DRIVER, work, "--cline", cline, *extra, timeout=180)
    hooks = work / "home" / ".cline" / "hooks"
    assert (hooks / "PreToolUse").read_text() == USER_HOOK  # the user's hook stays
    lines = (hooks / "PreToolUse.sh").read_text().splitlines()
    assert lines[0] == "#!/bin/sh"
    words = shlex.split(lines[2])
    assert words.pop(1).startswith("TACHOGRAPH_HOOK_TIMEOUT_S=")  # a held call's wait
    gate = ["--fail-closed"] if "--fail-closed" in extra else []
    assert words == [
        f"TACHOGRAPH_URL={report['serve_url']}",
        "exec",
        sys.executable,
        "-S",
        str(harness.REPO / "hook_client" / "command.py"),
        "cline",
        "PreToolUse",
        *gate,
    ]
    assert report["auth_exit"] == 0
    assert report["hub_daemons_stopped"] >= 1
    return report


def test_cline_is_governed_end_to_end(work: Path, cline: str) -> None:
    report = run_cline(cline, work)
    assert report["standin_errors"] == []
    # The rewrite ran the replacement: Cline got it as its own `commands` input.
    assert report["policy_calls"][0] == {"command": "echo original > ORIGINAL.txt"}
    assert "REWRITTEN.txt" in report["files"] and "ORIGINAL.txt" not in report["files"]
    # The PostToolUse context reached the model in the request after each tool's result.
    assert TOOL_CONTEXT not in report["model_requests"][0]
    assert TOOL_CONTEXT in report["model_requests"][1]
    # The deny kept hello.txt from being overwritten, and Cline's run stopped there: no
    # request after it, so the model never saw the reason.
    assert report["hello"] == "hello\n"
    assert len(report["model_requests"]) == 3
    assert DENY_REASON not in "".join(report["model_requests"])
    assert FINAL_TEXT not in report["stdout"]
    assert '"finishReason":"aborted"' in report["stdout"]
    assert report["user_hook_runs"] == 3  # the user's own PreToolUse ran beside ours

    with harness.stored(work) as client:
        sessions = client.get("/api/sessions", params={"limit": 50}).json()["items"]
        ours = [s for s in sessions if s.get("agent") == "cline"]
        assert len(ours) == 1, sessions
        session = ours[0]
        native = session["agentSessionId"]
        assert session["id"] == str(agent_session_uuid(f"cline:{native}"))
        # Cline's session (rootSessionId), not one agent's conversation (taskId, conv_…),
        # which is in what `cline --json` printed.
        assert re.fullmatch(r"\d+_[a-z0-9]+", native), native
        assert '"taskId":"conv_' in report["stdout"]
        audit = client.get(f"/api/sessions/{session['id']}/hooks").json()["items"]
        timeline = client.get(f"/api/sessions/{session['id']}/timeline").json()["items"]
        export = client.get(f"/api/sessions/{session['id']}/export").text.splitlines()
    tool_audit = [(r["event"], r["handlerId"], r["outcome"]) for r in audit if "Tool" in r["event"]]
    assert tool_audit == [
        ("PreToolUse", "shell-policy", "modify"),
        ("PostToolUse", "tool-context", "pass"),
        ("PreToolUse", None, "pass"),  # the editor: the policy matches the shell only
        ("PostToolUse", "tool-context", "pass"),
        ("PreToolUse", "shell-policy", "deny"),
    ]
    assert [r["event"] for r in audit][0] == "SessionStart"
    assert "SessionEnd" in [r["event"] for r in audit]  # SessionShutdown, after the abort
    notes = [json.loads(line)["data"].get("note") for line in export]
    assert any(n and "aborts the whole run" in n for n in notes), notes
    calls = [(c["tool"], c["status"]) for turn in timeline for c in turn["calls"]]
    assert calls == [("Bash", "ok"), ("Write", "ok"), ("Bash", "denied")]
    harness.verify(work)


def test_cline_completes_with_the_server_down(work: Path, cline: str) -> None:
    report = run_cline(cline, work, "--server-down")
    assert report["exit"] == 0, report["stderr"]
    assert FINAL_TEXT in report["stdout"]  # fail-open: every call ran, the run finished
    assert {"ORIGINAL.txt", "hello.txt"} <= set(report["files"])
    assert report["hello"] == "gone\n"
    events = harness.hook_failures(work)
    assert events.count("PreToolUse") == 3 and "PostToolUse" in events


def test_cline_fails_closed_when_installed_so(work: Path, cline: str) -> None:
    report = run_cline(cline, work, "--server-down", "--fail-closed")
    # The first tool call is a gate: denied, so Cline's run stopped before anything ran.
    assert report["files"] == []
    assert len(report["model_requests"]) == 1
    assert '"finishReason":"aborted"' in report["stdout"]
    assert "PreToolUse" in harness.hook_failures(work)


def test_a_held_call_waits_for_the_operator(work: Path, cline: str) -> None:
    report = run_cline(cline, work, "--held")
    [decision] = report["decisions"]
    assert decision["status"] == 200 and decision["waitedS"] >= OPERATOR_WAIT_S
    assert "HELD.txt" in report["files"]  # it ran once allowed, not before
    assert report["seconds"] >= OPERATOR_WAIT_S
    assert FINAL_TEXT in report["stdout"]
