"""The Factory Droid adapter with the real Droid 0.225.2, offline, against `tachograph serve`.

`scripts/agent-clis droid` installs the pinned binary (~250 MB, cached). Each run happens
inside `unshare -n` with loopback only: tests/agents/droid_run.py starts the managed
handlers, `tachograph serve` on SQLite, the scripted Chat Completions stand-in (a BYOK
custom model) and `droid exec` there, with the hooks installed by `tachograph hook install
droid <HOME>` beside the custom model. Afterwards the test reads the data dir through the
app.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from domain.lifecycle import agent_session_uuid
from tests.agents import droid_run, harness
from tests.agents.droid_run import SESSION_CONTEXT
from tests.agents.gemini_run import DENY_REASON, FINAL_TEXT

pytestmark = pytest.mark.slow

DRIVER = Path(droid_run.__file__)


@pytest.fixture(scope="module")
def droid() -> str:
    return harness.agent_cli("droid")


def run_droid(droid: str, work: Path, *extra: str) -> dict[str, Any]:
    report = harness.run_driver(DRIVER, work, "--droid", droid, *extra, timeout=180)
    installed = json.loads((work / "home" / ".factory" / "settings.json").read_text())
    assert installed["customModels"][0]["model"] == "standin-model"  # the user's model stays
    command = installed["hooks"]["PreToolUse"][0]["hooks"][0]["command"]
    gate = " --fail-closed" if "--fail-closed" in extra else ""
    assert command.endswith("droid PreToolUse" + gate)
    return report


def test_factory_droid_is_governed_end_to_end(tmp_path: Path, droid: str) -> None:
    report = run_droid(droid, tmp_path)
    assert report["exit"] == 0, report["stderr"]
    assert FINAL_TEXT in report["stdout"]
    assert report["standin_errors"] == []
    # The deny kept the command from running and its reason reached the model.
    assert "DENIED.txt" not in report["files"]
    assert DENY_REASON not in report["model_requests"][0]
    assert DENY_REASON in report["model_requests"][1]
    # The rewrite ran the new command instead of the original.
    assert "ORIGINAL.txt" not in report["files"]
    assert (tmp_path / "project" / "REWRITTEN.txt").read_text() == "rewritten\n"
    assert "hello.txt" in report["files"]
    assert SESSION_CONTEXT in report["model_requests"][0]  # SessionStart's context

    with harness.stored(tmp_path) as client:
        sessions = client.get("/api/sessions", params={"limit": 50}).json()["items"]
        ours = [s for s in sessions if s.get("agent") == "factory-droid"]
        assert len(ours) == 1, sessions
        native = ours[0]["agentSessionId"]
        assert ours[0]["id"] == str(agent_session_uuid(f"factory-droid:{native}"))
        assert f'"session_id":"{native}"' in report["stdout"]  # Droid's own id
        audit = client.get(f"/api/sessions/{ours[0]['id']}/hooks").json()["items"]
        timeline = client.get(f"/api/sessions/{ours[0]['id']}/timeline").json()["items"]
    assert [(r["event"], r["handlerId"], r["outcome"]) for r in audit] == [
        ("SessionStart", "session-context", "pass"),
        ("PreToolUse", "shell-policy", "deny"),
        ("PreToolUse", "shell-policy", "modify"),
        ("PostToolUse", None, "pass"),
        ("PreToolUse", None, "pass"),  # Create: the policy matches the shell only
        ("PostToolUse", None, "pass"),
        ("Stop", None, "pass"),
        ("SessionEnd", None, "pass"),
    ]
    # Recorded under Claude Code's names (Droid sends no call id, so a PreToolUse and its
    # PostToolUse are not paired into one call).
    assert {c["tool"] for turn in timeline for c in turn["calls"]} == {"Bash", "Write"}
    harness.verify(tmp_path)


def test_factory_droid_completes_with_the_server_down(tmp_path: Path, droid: str) -> None:
    report = run_droid(droid, tmp_path, "--server-down")
    assert report["exit"] == 0, report["stderr"]
    assert {"DENIED.txt", "ORIGINAL.txt", "hello.txt"} <= set(report["files"])  # fail-open
    events = harness.hook_failures(tmp_path)
    assert events[0] == "SessionStart" and "PreToolUse" in events and "Stop" in events


def test_factory_droid_fails_closed_when_installed_so(tmp_path: Path, droid: str) -> None:
    report = run_droid(droid, tmp_path, "--server-down", "--fail-closed")
    # Every tool call is a gate: denied, so no command ran and no file was created.
    assert report["files"] == []
    assert "Tachograph could not be reached" in report["model_requests"][1]
    assert "PreToolUse" in harness.hook_failures(tmp_path)
