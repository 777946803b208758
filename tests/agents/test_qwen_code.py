"""The Qwen Code adapter with the real Qwen Code 0.24.4, offline, against `tachograph serve`.

`scripts/agent-clis qwen` installs the pinned CLI (network only when it is not cached:
never skipped, a missing CLI fails). Each run happens inside `unshare -n` with loopback
only: tests/agents/qwen_run.py starts the managed handlers, `tachograph serve` on SQLite,
the scripted Chat Completions stand-in and `qwen` headless there, with the hooks installed
by `tachograph hook install qwen <HOME>` beside the user's own settings. Afterwards the
test reads the data dir through the app.
"""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path
from typing import Any

import pytest

from domain.lifecycle import agent_session_uuid
from tests.agents import harness, qwen_run
from tests.agents.gemini_run import DENY_REASON, FINAL_TEXT, PROMPT
from tests.agents.qwen_run import PROMPT_CONTEXT, SESSION_CONTEXT, USER_SETTINGS

pytestmark = pytest.mark.slow

DRIVER = Path(qwen_run.__file__)


@pytest.fixture(scope="module")
def qwen() -> str:
    return harness.agent_cli("qwen")


def run_qwen(qwen: str, work: Path, *extra: str) -> dict[str, Any]:
    report = harness.run_driver(DRIVER, work, "--qwen", qwen, *extra, timeout=180)
    installed = json.loads((work / "home" / ".qwen" / "settings.json").read_text())
    assert installed["security"] == USER_SETTINGS["security"]  # the user's settings stay
    words = shlex.split(installed["hooks"]["PreToolUse"][0]["hooks"][0]["command"])
    assert words.pop(1).startswith("TACHOGRAPH_HOOK_TIMEOUT_S=")  # a held call's wait
    gate = ["--fail-closed"] if "--fail-closed" in extra else []
    assert words == [
        f"TACHOGRAPH_URL={report['serve_url']}",
        sys.executable,
        "-S",
        str(harness.REPO / "hook_client" / "command.py"),
        "qwen",
        "PreToolUse",
        *gate,
    ]
    return report


def test_qwen_code_is_governed_end_to_end(tmp_path: Path, qwen: str) -> None:
    report = run_qwen(qwen, tmp_path)
    assert report["exit"] == 0, report["stderr"]
    assert FINAL_TEXT in report["stdout"]
    assert report["standin_errors"] == []
    # The deny kept the command from running and its reason reached the model.
    assert report["policy_calls"][0]["command"].endswith("rm -rf build")
    assert "DENIED.txt" not in report["files"]
    assert DENY_REASON not in report["model_requests"][0]
    assert DENY_REASON in report["model_requests"][1]
    # Qwen Code cannot apply a rewrite: the call was blocked, the model told the replacement.
    assert {"ORIGINAL.txt", "REWRITTEN.txt"}.isdisjoint(report["files"])
    assert "Replacement input" in report["model_requests"][2]
    assert "echo rewritten > REWRITTEN.txt" in report["model_requests"][2]
    assert "hello.txt" in report["files"]
    # SessionStart's and UserPromptSubmit's context reached the model in its first request.
    assert SESSION_CONTEXT in report["model_requests"][0]
    assert PROMPT_CONTEXT in report["model_requests"][0]

    with harness.stored(tmp_path) as client:
        sessions = client.get("/api/sessions", params={"limit": 50}).json()["items"]
        ours = [s for s in sessions if s.get("agent") == "qwen-code"]
        assert len(ours) == 1, sessions
        session = ours[0]
        native = session["agentSessionId"]
        assert session["id"] == str(agent_session_uuid(f"qwen-code:{native}"))
        assert f'"session_id":"{native}"' in report["stdout"]  # Qwen Code's own id
        detail = client.get(f"/api/sessions/{session['id']}").json()
        assert detail["title"] == PROMPT
        assert detail["summary"] == FINAL_TEXT
        audit = client.get(f"/api/sessions/{session['id']}/hooks").json()["items"]
        timeline = client.get(f"/api/sessions/{session['id']}/timeline").json()["items"]
        export = client.get(f"/api/sessions/{session['id']}/export").text.splitlines()
    tool_audit = [(r["event"], r["handlerId"], r["outcome"]) for r in audit if "Tool" in r["event"]]
    assert tool_audit == [
        ("PreToolUse", "shell-policy", "deny"),
        ("PostToolBatch", None, "pass"),
        ("PreToolUse", "shell-policy", "modify"),
        ("PostToolBatch", None, "pass"),
        ("PreToolUse", None, "pass"),  # write_file: the policy matches the shell only
        ("PostToolUse", None, "pass"),
        ("PostToolBatch", None, "pass"),
    ]
    # The dispatch's note says what Qwen Code was actually answered.
    notes = [json.loads(line)["data"].get("note") for line in export]
    assert any(n and "ignores updatedInput" in n for n in notes), notes
    assert [r["event"] for r in audit].count("UserPromptSubmit") == 1  # continuations: not
    calls = [(c["tool"], c["status"]) for turn in timeline for c in turn["calls"]]
    # The rewritten call was answered as a deny Qwen Code reports no result for: the
    # timeline shows the recorded decision (modify) and that no result came.
    assert calls == [("Bash", "denied"), ("Bash", "no_result"), ("Write", "ok")]
    harness.verify(tmp_path)


def test_qwen_code_completes_with_the_server_down(tmp_path: Path, qwen: str) -> None:
    report = run_qwen(qwen, tmp_path, "--server-down")
    assert report["exit"] == 0, report["stderr"]
    assert FINAL_TEXT in report["stdout"]
    assert {"DENIED.txt", "ORIGINAL.txt", "hello.txt"} <= set(report["files"])  # fail-open
    events = harness.hook_failures(tmp_path)
    assert events[0] == "SessionStart" and "PreToolUse" in events and "Stop" in events


def test_qwen_code_fails_closed_when_installed_so(tmp_path: Path, qwen: str) -> None:
    report = run_qwen(qwen, tmp_path, "--server-down", "--fail-closed")
    # The prompt is a gate: denied, so no model turn and no tool ran.
    assert report["model_requests"] == []
    assert report["files"] == []
    assert "UserPromptSubmit" in harness.hook_failures(tmp_path)
