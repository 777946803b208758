"""The real Codex CLI (0.169.0) governed by a real `tachograph serve`, offline.

Codex, its scripted model stand-in (openai_responses_standin.py), the managed handlers and
`serve` on SQLite all run in a loopback-only network namespace (codex_run.py), with hooks
installed by `tachograph hook install codex`. The run's log is then read back through the
app, and `tachograph verify` checks its chain.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from hook_client.command import FAIL_CLOSED_REASON
from tests.agents import codex_run, harness
from tests.agents import openai_responses_standin as standin

DRIVER = Path(codex_run.__file__)


@pytest.fixture(scope="module")
def codex_binary() -> str:
    return harness.agent_cli("codex")


def run_codex(codex: str, work: Path, *extra: str) -> dict[str, Any]:
    report = harness.run_driver(DRIVER, work, "--codex", codex, *extra)
    assert report["exit"] == 0, report["stderr"]
    assert not report["standin_errors"]
    return report


@pytest.fixture(scope="module")
def governed_run(
    codex_binary: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Path, dict[str, Any], TestClient]]:
    work = tmp_path_factory.mktemp("codex")
    report = run_codex(codex_binary, work)
    with harness.stored(work) as client:
        yield work, report, client


def codex_session(client: TestClient) -> dict[str, Any]:
    sessions: list[dict[str, Any]] = client.get("/api/sessions").json()["items"]
    (session,) = [s for s in sessions if s["agent"] == "codex"]
    return session


def hook_audit(client: TestClient) -> list[dict[str, Any]]:
    hooks = client.get(f"/api/sessions/{codex_session(client)['id']}/hooks")
    items: list[dict[str, Any]] = hooks.json()["items"]
    return items


def test_the_policy_denies_a_command_and_codex_tells_the_model_why(governed_run: Any) -> None:
    _, report, _ = governed_run
    assert "DENIED.txt" not in report["files"]  # the denied command never ran
    later = [r for r in report["model_requests"] if codex_run.DENY_REASON in r]
    assert later, "the deny reason reached the model in a later request"


def test_the_managed_handlers_context_reaches_the_model(governed_run: Any) -> None:
    _, report, _ = governed_run
    # Codex hands both to the model as developer messages, from the first request on.
    developer = standin.developer_texts(json.loads(report["model_requests"][0]))
    assert any(codex_run.SESSION_CONTEXT in text for text in developer)  # SessionStart's
    assert any(codex_run.PROMPT_CONTEXT in text for text in developer)  # UserPromptSubmit's


def test_a_permission_request_is_recorded_and_left_to_codexs_own_approval(
    governed_run: Any,
) -> None:
    """PermissionRequest is observational: Tachograph answers no decision, so Codex asks
    its own reviewer, whose allow lets the command run outside the sandbox."""
    _, report, client = governed_run
    assert "ESCALATED.txt" in report["files"]
    (review,) = report["reviews"]
    assert codex_run.ESCALATED_COMMAND in review
    (asked,) = [r for r in hook_audit(client) if r["event"] == "PermissionRequest"]
    assert (asked["handlerId"], asked["outcome"]) == (None, "pass")


def test_a_rewritten_command_runs_in_place_of_the_original(governed_run: Any) -> None:
    _, report, _ = governed_run
    assert "REWRITTEN.txt" in report["files"] and "ORIGINAL.txt" not in report["files"]
    assert "hello.txt" in report["files"]  # apply_patch went through
    assert codex_run.FINAL_TEXT in report["stdout"]


def test_the_session_has_codexs_id_title_summary_and_status(governed_run: Any) -> None:
    work, _, client = governed_run
    session = codex_session(client)
    firsts = [
        json.loads(path.read_text().splitlines()[0])["payload"]
        for path in (work / "home" / ".codex" / "sessions").rglob("*.jsonl")
    ]
    # The reviewer's thread has a transcript of its own, as a subagent of this one.
    (native,) = {p["id"] for p in firsts if p["source"] == "exec"}
    assert session["agentSessionId"] == native
    assert session["title"] == codex_run.PROMPT
    assert session["summary"] == codex_run.FINAL_TEXT
    assert session["status"] == "ended"


def test_the_audit_shows_each_hook_in_order_and_the_log_verifies(governed_run: Any) -> None:
    work, _, client = governed_run
    assert [(r["event"], r["handlerId"], r["outcome"]) for r in hook_audit(client)] == [
        ("SessionStart", "session-context", "pass"),
        ("UserPromptSubmit", "prompt-context", "pass"),
        ("PreToolUse", "shell-policy", "deny"),
        ("PreToolUse", "shell-policy", "modify"),
        ("PostToolUse", None, "pass"),
        ("PreToolUse", "shell-policy", "pass"),
        ("PostToolUse", None, "pass"),
        ("PreToolUse", "shell-policy", "pass"),
        ("PermissionRequest", None, "pass"),
        ("PostToolUse", None, "pass"),
        ("Stop", None, "pass"),
        ("SessionEnd", None, "pass"),
    ]
    harness.verify(work)


def test_the_timeline_shows_what_codex_tried_and_what_ran(governed_run: Any) -> None:
    _, _, client = governed_run
    session = codex_session(client)
    (turn,) = client.get(f"/api/sessions/{session['id']}/timeline").json()["items"]
    calls = [(c["tool"], c["summary"], c["decision"]) for c in turn["calls"]]
    assert calls == [
        ("Bash", codex_run.DENIED_COMMAND, "deny"),
        ("Bash", codex_run.REWRITTEN_COMMAND, "modify"),
        ("apply_patch", "hello.txt", "pass"),
        ("Bash", codex_run.ESCALATED_COMMAND, "pass"),
    ]


def test_with_the_server_down_codex_still_completes_fast(codex_binary: str, tmp_path: Path) -> None:
    report = run_codex(codex_binary, tmp_path, "--server-down")
    # Nothing governed them: fail-open, as documented (the escalation was Codex's to allow).
    assert {"DENIED.txt", "ESCALATED.txt"} <= set(report["files"])
    assert codex_run.FINAL_TEXT in report["stdout"]
    assert report["seconds"] < 20
    # Each hook logged its failed delivery, none broke the run.
    assert len(harness.hook_failures(tmp_path)) >= 6


def test_a_fail_closed_hook_denies_the_permission_once_tachograph_is_gone(
    codex_binary: str, tmp_path: Path
) -> None:
    """Only a fail-closed hook decides a PermissionRequest: serve stops while the escalated
    command's PreToolUse is answered, so the permission request finds Tachograph gone."""
    report = run_codex(codex_binary, tmp_path, "--serve-stops-at-escalation")
    assert "ESCALATED.txt" not in report["files"]
    assert report["reviews"] == []  # the hook's deny decided: Codex's reviewer was not asked
    assert any(FAIL_CLOSED_REASON in r for r in report["model_requests"][1:])
    assert harness.hook_failures(tmp_path)[0] == "PermissionRequest"
    with harness.stored(tmp_path) as client:
        audit = [(r["event"], r["handlerId"], r["outcome"]) for r in hook_audit(client)]
    # What serve saw before it went: the escalated command passed its PreToolUse policy.
    assert audit == [
        ("SessionStart", "session-context", "pass"),
        ("UserPromptSubmit", "prompt-context", "pass"),
        ("PreToolUse", "shell-policy", "pass"),
    ]
