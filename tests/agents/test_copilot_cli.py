"""The Copilot CLI adapter against the real Copilot CLI 1.0.102, offline (§6.5, issue 26).

copilot_driver.py runs inside `unshare -n` (loopback only): the model stand-in, a managed
PreToolUse policy handler (TACHOGRAPH_HOOKS), `tachograph serve` on SQLite and Copilot
CLI, with hooks installed by `tachograph hook install copilot <home>`, once with command
hooks, once with native HTTP hooks, once with a user's own hook file registering the same
hook client under PascalCase event names, once with serve stopped. This test then reads what
serve stored through the app and `tachograph verify`.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from domain.lifecycle import agent_session_uuid
from tests.agents import copilot_driver, harness
from tests.agents import openai_responses_standin as standin
from tests.agents.copilot_driver import (
    DENIED,
    DENY_REASON,
    FINAL_TEXT,
    MARKER,
    PROMPT,
    PROMPT_CONTEXT,
    REWRITTEN,
    SESSION_CONTEXT,
)

pytestmark = pytest.mark.slow

DRIVER = Path(copilot_driver.__file__)

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
# Each payload family names Copilot's tools its own way: (shell, file change).
TOOLS = {
    "command": ("bash", "apply_patch"),
    "http": ("bash", "apply_patch"),
    "pascal": ("Bash", "Edit"),
}
MODES = list(TOOLS)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    binary = harness.agent_cli("copilot")
    work = tmp_path_factory.mktemp("copilot")
    report = harness.run_driver(DRIVER, work, "--copilot", binary, timeout=180)
    report["work"] = work
    return report


@pytest.fixture(scope="module")
def stored(runs: dict[str, Any]) -> Iterator[TestClient]:
    with harness.stored(runs["work"]) as client:
        yield client


def test_the_stand_in_answered_every_request(runs: dict[str, Any]) -> None:
    assert runs["standin_errors"] == []


@pytest.mark.parametrize("mode", MODES)
def test_deny_and_modify_hold_and_the_model_hears_the_reason(
    runs: dict[str, Any], mode: str
) -> None:
    run = runs[mode]
    assert run["exit"] == 0, run["stderr"]
    assert FINAL_TEXT in run["stdout"]
    # Denied: the marker command never ran, and its reason reached the model.
    assert MARKER not in run["files"]
    assert any(f"Denied by preToolUse hook: {DENY_REASON}" in r for r in run["model_requests"][1:])
    # Rewritten: the replacement ran instead of the original.
    assert "original.txt" not in run["files"] and run["rewritten"] == "REWRITTEN\n"
    assert "hello.txt" in run["files"]
    entries = [e for entries in run["hook_file"]["hooks"].values() for e in entries]
    assert {e["type"] for e in entries} == {"http" if mode == "http" else "command"}


@pytest.mark.parametrize("mode", MODES)
def test_the_managed_handlers_context_reaches_the_model(runs: dict[str, Any], mode: str) -> None:
    # Copilot gives sessionStart's context as a user message of its own, and the prompt's
    # beside the prompt, from the first model request on.
    users = standin.user_texts(json.loads(runs[mode]["model_requests"][0]))
    assert any(SESSION_CONTEXT in text for text in users), users
    assert any(PROMPT_CONTEXT in text and PROMPT in text for text in users), users


@pytest.mark.parametrize("mode", MODES)
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
    # The timeline names each call's tool as the payload family did.
    (turn,) = stored.get(f"/api/sessions/{session_id}/timeline").json()["items"]
    decided = [c for c in turn["calls"] if c["decision"]]
    shell, patch = TOOLS[mode]
    assert [(c["tool"], c["decision"]) for c in decided] == [
        (shell, "deny"),
        (shell, "modify"),
        (patch, "pass"),
    ]
    assert [c["summary"] for c in decided[:2]] == [DENIED, REWRITTEN]


def test_the_log_verifies(runs: dict[str, Any]) -> None:
    harness.verify(runs["work"])


def test_with_the_server_down_the_agent_still_completes_fast(runs: dict[str, Any]) -> None:
    down = runs["down"]
    assert down["exit"] == 0, down["stderr"]
    assert FINAL_TEXT in down["stdout"]
    # Fail open: nothing gated the commands, so they ran as the model asked.
    assert {MARKER, "original.txt", "hello.txt"} <= set(down["files"])
    assert down["seconds"] < 15, down["seconds"]
    assert down["seconds"] < runs["command"]["seconds"] + 5
