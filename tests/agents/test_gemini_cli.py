"""The Gemini CLI adapter with the real Gemini CLI 0.61.0, offline, against `tachograph serve`.

`scripts/agent-clis gemini` installs the pinned CLI (network only when it is not cached:
never skipped, a missing CLI fails). Each run happens inside `unshare -n` with loopback
only: tests/agents/gemini_run.py starts the managed handlers, `tachograph serve` on
SQLite, the scripted Gemini API stand-in and `gemini -p` there. The hooks are installed by
`tachograph hook install gemini <HOME>` into a settings.json that turns Gemini CLI's
environment redaction on, so the agent token reaches the hook only through the names the
install allow-lists. Afterwards the test reads the data dir through the app and the CLI.
"""

from __future__ import annotations

import json
import re
import shlex
import sys
from pathlib import Path
from typing import Any

import pytest

from domain.lifecycle import agent_session_uuid
from tests.agents import gemini_run, harness
from tests.agents.gemini_run import (
    ADMIN_KEY,
    DENY_REASON,
    FINAL_TEXT,
    ORIGINAL_COMMAND,
    PROMPT,
    PROMPT_CONTEXT,
    USER_SETTINGS,
)

pytestmark = pytest.mark.slow

DRIVER = Path(gemini_run.__file__)


@pytest.fixture(scope="module")
def gemini() -> str:
    return harness.agent_cli("gemini")


def run_gemini(gemini: str, work: Path, *extra: str) -> dict[str, Any]:
    report = harness.run_driver(DRIVER, work, "--gemini", gemini, *extra, timeout=150)
    assert report["exit"] == 0, report["stderr"]
    assert FINAL_TEXT in report["stdout"]
    # The install merged Tachograph's hooks into the user's settings, pinned to serve.
    installed = json.loads((work / "home" / ".gemini" / "settings.json").read_text())
    assert installed["security"]["auth"] == USER_SETTINGS["security"]["auth"]
    command = installed["hooks"]["BeforeTool"][0]["hooks"][0]["command"]
    words = shlex.split(command)
    # A call can be held on BeforeTool: the client's own wait is pinned past the longest
    # hold (cli/hook_waits.py), the longest a rule may set when the server did not say.
    assert words.pop(1).startswith("TACHOGRAPH_HOOK_TIMEOUT_S=")
    assert words == [
        f"TACHOGRAPH_URL={report['serve_url']}",
        sys.executable,
        "-S",
        str(harness.REPO / "hook_client" / "command.py"),
        "gemini",
        "BeforeTool",
    ]
    return report


def test_gemini_cli_is_governed_end_to_end(tmp_path: Path, gemini: str) -> None:
    report = run_gemini(gemini, tmp_path)
    assert report["standin_errors"] == []

    # The policy saw both shell commands; the deny kept the first from running, and its
    # reason reached the model in the next request.
    assert report["policy_calls"][0]["command"].endswith("rm -rf build")
    assert report["policy_calls"][1]["command"] == ORIGINAL_COMMAND
    assert "DENIED.txt" not in report["files"]
    denied_at = next(i for i, body in enumerate(report["model_requests"]) if DENY_REASON in body)
    assert denied_at == 1
    assert "Tool execution blocked" in report["model_requests"][1]
    # BeforeAgent's additionalContext went to the model with the prompt, in its first request.
    first = json.loads(report["model_requests"][0])
    (prompt_turn,) = [c for c in first["contents"] if c["role"] == "user"]
    texts = [p.get("text", "") for p in prompt_turn["parts"]]
    assert any(PROMPT_CONTEXT in t for t in texts) and any(PROMPT in t for t in texts)
    # The rewrite replaced the whole argument object, and the rewritten command ran.
    assert "ORIGINAL.txt" not in report["files"]
    assert {"REWRITTEN.txt", "hello.txt"} <= set(report["files"])
    assert (tmp_path / "project" / "REWRITTEN.txt").read_text() == "rewritten\n"

    with harness.stored(tmp_path, ADMIN_KEY) as client:
        sessions = client.get("/api/sessions", params={"limit": 50}).json()["items"]
        ours = [s for s in sessions if s.get("agent") == "gemini-cli"]
        assert len(ours) == 1, sessions
        session = ours[0]
        native = session["agentSessionId"]
        assert re.fullmatch(r"[0-9a-f-]{36}", native)
        assert session["id"] == str(agent_session_uuid(f"gemini-cli:{native}"))
        chats = (tmp_path / "home" / ".gemini" / "tmp").glob(f"*/chats/session-*{native[:8]}*")
        assert list(chats), "Gemini CLI's own transcript names the same native session id"
        detail = client.get(f"/api/sessions/{session['id']}").json()
        assert detail["title"] == PROMPT
        assert detail["summary"] == FINAL_TEXT
        assert detail["status"] == "ended"
        assert detail["workspaceId"] == "default"
        audit = client.get(f"/api/sessions/{session['id']}/hooks").json()["items"]
    assert [(r["event"], r["handlerId"], r["outcome"]) for r in audit] == [
        ("SessionStart", None, "pass"),
        ("UserPromptSubmit", "prompt-context", "pass"),
        ("PreToolUse", "shell-policy", "deny"),
        ("PreToolUse", "shell-policy", "modify"),
        ("PostToolUse", None, "pass"),
        ("PreToolUse", None, "pass"),  # write_file: the policy matches the shell only
        ("PostToolUse", None, "pass"),
        ("Stop", None, "pass"),
        ("SessionEnd", None, "pass"),
    ]
    assert "BeforeModel" not in {r["event"] for r in audit}  # model events: not recorded
    harness.verify(tmp_path, ADMIN_KEY)


def test_gemini_cli_completes_fast_with_the_server_down(tmp_path: Path, gemini: str) -> None:
    report = run_gemini(gemini, tmp_path, "--server-down")
    assert {"DENIED.txt", "ORIGINAL.txt", "hello.txt"} <= set(report["files"])  # fail-open
    # Each hook gave up at once (connection refused): no more than the CLI's own pace.
    assert report["seconds"] < 20, report["seconds"]
    events = harness.hook_failures(tmp_path)
    assert events[:3] == ["SessionStart", "BeforeAgent", "BeforeTool"]
    assert "AfterAgent" in events and "SessionEnd" in events
