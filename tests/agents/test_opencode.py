"""The OpenCode adapter with the real OpenCode 1.18.33 and Kilo 7.7.9, offline, against
`tachograph serve`.

`scripts/agent-clis opencode|kilo` installs the pinned CLIs (network only when they are
not cached: never skipped, a missing CLI fails). Each run happens inside `unshare -n` with
loopback only: tests/agents/opencode_run.py starts the managed handlers and `tachograph
serve` on SQLite with an approval rule, the scripted Chat Completions stand-in and the
CLI's `run`, with Tachograph's plugin installed by `tachograph hook install <runtime>
<HOME>` beside the user's own configuration (and no plugin package seeded). One run checks
many facts: runs take ~15-20 s each. Afterwards the test reads the data dir through the app.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from domain.lifecycle import agent_session_uuid
from tests.agents import harness, opencode_run
from tests.agents.gemini_run import DENY_REASON, FINAL_TEXT, PROMPT
from tests.agents.opencode_run import (
    ADMIN_KEY,
    ALLOW_REASON,
    KEPT_FILE,
    KEPT_TEXT,
    LESSON,
    PROMPT_CONTEXT,
    SESSION_CONTEXT,
)

pytestmark = pytest.mark.slow

DRIVER = Path(opencode_run.__file__)
RUNTIMES = ("opencode", "kilo")
# `opencode run` quotes each word of its message that holds a space before the model sees it.
SENT_PROMPT = f'"{PROMPT}"'


def run(runtime: str, work: Path, *extra: str) -> dict[str, Any]:
    binary = harness.agent_cli(runtime)
    report = harness.run_driver(
        DRIVER, work, "--agent", binary, "--runtime", runtime, *extra, timeout=240
    )
    assert report["user_config_kept"]  # the user's own configuration stays
    plugin = work / "home" / ".config" / runtime / "plugin" / "tachograph.js"
    assert plugin.read_text().startswith("// Tachograph's plugin for ")
    return report


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_the_runtime_is_governed_end_to_end(tmp_path: Path, runtime: str) -> None:
    report = run(runtime, tmp_path)
    assert report["exit"] == 0, report["stderr"]
    assert not report["sdk_install_tried"]  # no network, no wait for it, at start-up
    assert report["standin_errors"] == []
    requests = report["model_requests"]
    # The deny kept the user's file from being overwritten, and the model read why.
    assert report["kept_text"] == KEPT_TEXT
    assert DENY_REASON not in requests[0] and DENY_REASON in requests[1]
    # The rewrite ran the new command instead of the model's.
    assert "ORIGINAL.txt" not in report["files"] and "REWRITTEN.txt" in report["files"]
    # The held call waited for the operator, then ran.
    assert report["operator"] == {"ran_before_decision": False, "decided": 200}
    assert {"APPROVED.txt", "hello.txt"} <= set(report["files"])
    # SessionStart's and UserPromptSubmit's context, and what the agent learned, reached
    # the model's first request.
    assert SESSION_CONTEXT in requests[0] and PROMPT_CONTEXT in requests[0]
    assert LESSON in requests[0]

    with harness.stored(tmp_path, ADMIN_KEY) as client:
        sessions = client.get("/api/sessions", params={"limit": 50}).json()["items"]
        assert [s["agent"] for s in sessions] == [runtime]
        session = sessions[0]
        native = session["agentSessionId"]
        assert native.startswith("ses_") and native in report["stdout"]
        assert session["id"] == str(agent_session_uuid(f"{runtime}:{native}"))
        detail = client.get(f"/api/sessions/{session['id']}").json()
        assert (detail["title"], detail["summary"]) == (SENT_PROMPT, FINAL_TEXT)
        audit = client.get(f"/api/sessions/{session['id']}/hooks").json()["items"]
        timeline = client.get(f"/api/sessions/{session['id']}/timeline").json()["items"]
        [approval] = client.get("/api/approvals").json()["items"]
    assert [(r["event"], r["handlerId"], r["outcome"]) for r in audit] == [
        ("SessionStart", "session-context", "pass"),
        ("UserPromptSubmit", "prompt-context", "pass"),
        ("PreToolUse", "shell-policy", "deny"),
        ("PreToolUse", "shell-policy", "modify"),
        ("PostToolUse", None, "pass"),
        ("PreToolUse", "shell-policy", "pass"),
        ("PreToolUse", "approval:approved-marker", "pass"),
        ("PostToolUse", None, "pass"),
        ("PreToolUse", "shell-policy", "pass"),
        ("PostToolUse", None, "pass"),
        ("Stop", None, "pass"),
    ]
    calls = [(c["tool"], c["status"]) for turn in timeline for c in turn["calls"]]
    assert calls == [("Write", "denied"), ("Bash", "ok"), ("Bash", "ok"), ("Write", "ok")]
    assert (approval["agent"], approval["toolName"]) == (runtime, "Bash")
    assert (approval["decision"], approval["reason"]) == ("allow", ALLOW_REASON)
    harness.verify(tmp_path, ADMIN_KEY)


def test_opencode_completes_with_the_server_down(tmp_path: Path) -> None:
    report = run("opencode", tmp_path, "--server-down")
    assert report["exit"] == 0, report["stderr"]
    assert FINAL_TEXT in report["stdout"]
    # Fail-open: every call ran, the user's file was overwritten as the model asked.
    assert {"ORIGINAL.txt", "APPROVED.txt", "hello.txt"} <= set(report["files"])
    assert report["kept_text"] == "gone\n"
    events = harness.hook_failures(tmp_path)
    assert events[:2] == ["SessionStart", "UserPromptSubmit"]
    assert {"PreToolUse", "PostToolUse", "Stop"} <= set(events)


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_the_plugin_fails_closed_when_installed_so(tmp_path: Path, runtime: str) -> None:
    report = run(runtime, tmp_path, "--server-down", "--fail-closed")
    # The prompt is a gate: refused, so no model turn and no tool ran.
    assert report["model_requests"] == []
    assert report["files"] == [".git", KEPT_FILE]
    assert "UserPromptSubmit" in harness.hook_failures(tmp_path)
