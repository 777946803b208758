"""A policy rule (not a handler) governing the real Claude Code 2.1.328 and Gemini CLI 0.61.0.

policy_run.py runs inside `unshare -n` with loopback only: `tachograph serve` on SQLite
with no managed handler, a policy document recorded and activated through the API, and
`claude -p` twice (native HTTP hooks, command hooks) and `gemini -p` once against their
scripted model stand-ins, with hooks from `tachograph hook install`. In every run a deny
rule keeps GUARDED.txt from being overwritten (through `bash -c` for Claude Code, with
Gemini CLI's own `write_file`) and the model is told the rule's reason; a shadow rule's
would-deny is recorded while its call runs. In the Claude Code runs an `ask` rule holds
a call until the operator decides: allowed (HTTP hooks), denied with a reason (command
hooks). This test reads what the runs reported, and what serve stored.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from domain.lifecycle import agent_session_uuid
from tests.agents import harness
from tests.agents import policy_run as driver
from tests.agents.anthropic_standin import is_agent_loop, text_of, tool_results
from tests.test_activity_facts import dispatches

pytestmark = pytest.mark.slow

DRIVER = Path(driver.__file__)
HOLD_S = 12.0  # longer than the hook client's own default wait (10 s)
CLAUDE = list(driver.CLAUDE_RUNS)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    claude, gemini = harness.agent_cli("claude"), harness.agent_cli("gemini")
    work = tmp_path_factory.mktemp("policy-runtimes")
    report = harness.run_driver(
        DRIVER, work, "--claude", claude, "--gemini", gemini, "--hold-s", str(HOLD_S),
        timeout=600,
    )  # fmt: skip
    report["work"] = work
    return report


@pytest.fixture(scope="module")
def stored(runs: dict[str, Any]) -> Iterator[TestClient]:
    with harness.stored(runs["work"], driver.ADMIN_KEY) as client:
        yield client


def session_of(stored: TestClient, runs: dict[str, Any], name: str) -> str:
    if name in driver.CLAUDE_RUNS:
        return str(agent_session_uuid(f"claude-code:{runs[name]['native_session']}"))
    sessions = stored.get("/api/sessions", params={"limit": 50}).json()["items"]
    (gemini,) = [s["id"] for s in sessions if s.get("agent") == "gemini-cli"]
    return str(gemini)


def policy_of(record: dict[str, Any]) -> tuple[str, str, str] | None:
    policy = record.get("policy")
    return None if policy is None else (policy["rule_id"], policy["mode"], policy["outcome"])


def tool_dispatches(stored: TestClient, session_id: str) -> list[dict[str, Any]]:
    """The session's PreToolUse dispatches, in order."""
    return [d for d in dispatches(stored, session_id) if d["event_name"] == "PreToolUse"]


def claude_requests(run: dict[str, Any]) -> list[dict[str, Any]]:
    return [body for body in run["model_requests"] if is_agent_loop(body)]


def test_the_document_is_active_and_hooks_outwait_its_ask_rule(runs: dict[str, Any]) -> None:
    assert runs["revision"]["activated"] == 200
    assert runs["revision"]["digest"].startswith("sha256:")
    # serve reports the ask rule's hold, and the install read it: each PreToolUse hook
    # waits longer than the rule's 120 s.
    assert runs["longest_hold_s"] == 120
    assert runs["claude_standin_errors"] == [] and runs["gemini"]["standin_errors"] == []
    for name in CLAUDE:
        (entry,) = runs[name]["settings"]["hooks"]["PreToolUse"]
        (hook,) = entry["hooks"]
        assert hook["type"] == ("http" if name == "http" else "command"), hook
        assert hook["timeout"] > 120, hook


@pytest.mark.parametrize("name", CLAUDE)
def test_a_deny_rule_keeps_claude_code_from_overwriting_the_file(
    runs: dict[str, Any], stored: TestClient, name: str
) -> None:
    run = runs[name]
    assert run["exit"] == 0, run["stderr"]
    assert json.loads(run["stdout"])["result"] == driver.FINAL_TEXT
    assert run["guarded"] == driver.ORIGINAL  # `bash -c 'echo … > GUARDED.txt'` never ran
    first, second, *_ = claude_requests(run)
    assert driver.DENY_REASON not in json.dumps(first)
    (refused,) = tool_results(second)
    assert refused.get("is_error") is True, refused
    assert text_of(refused) == f"PreToolUse:Bash hook error: {driver.DENY_REASON}"
    denied = tool_dispatches(stored, session_of(stored, runs, name))[0]
    assert denied["outcome"] == "deny"
    assert denied["policy"]["revision_id"] == runs["revision"]["id"]
    assert policy_of(denied) == ("guarded-file", "enforce", "deny")


@pytest.mark.parametrize("name", [*CLAUDE, "gemini"])
def test_a_shadow_rule_records_its_would_deny_while_the_call_runs(
    runs: dict[str, Any], stored: TestClient, name: str
) -> None:
    assert driver.SHADOWED in runs[name]["files"]
    shadowed = tool_dispatches(stored, session_of(stored, runs, name))[1]
    assert shadowed["outcome"] == "pass"
    assert policy_of(shadowed) == ("shadow-marker", "shadow", "deny")


@pytest.mark.parametrize("name", CLAUDE)
def test_an_ask_rule_holds_claude_codes_call_until_the_operator_decides(
    runs: dict[str, Any], stored: TestClient, name: str
) -> None:
    run = runs[name]
    _, verdict, reason = driver.CLAUDE_RUNS[name]
    operator = run["operator"]
    request = operator["request"]
    assert request is not None, run["stderr"]
    assert request["ruleId"] == "policy:operator-decides"
    assert request["requestReason"] == driver.ASK_REASON
    assert request["inputSummary"] == f"touch {driver.ASKED}"
    # Held past the hook client's own default wait, and nothing ran meanwhile.
    waiting = operator["before_decision"]
    assert waiting["cli_running"] is True and waiting["marker_made"] is False
    assert waiting["still_pending"] == [request["id"]]
    assert operator["held_s"] >= HOLD_S
    assert operator["decide_status"] == 200, operator["decided"]
    assert (operator["decided"]["decision"], operator["decided"]["reason"]) == (verdict, reason)
    session_id = session_of(stored, runs, name)
    held = tool_dispatches(stored, session_id)[2]
    assert policy_of(held) == ("operator-decides", "enforce", "ask")
    audit = stored.get(f"/api/sessions/{session_id}/hooks").json()["items"]
    (row,) = [i for i in audit if i["event"] == "PreToolUse"][2:]
    assert row["durationMs"] >= HOLD_S * 1000  # the hook request itself was held open
    answered = tool_results(claude_requests(run)[-1])[-1]
    if verdict == "allow":
        assert driver.ASKED in run["files"]
        assert held["outcome"] == "pass" and answered.get("is_error") is not True
    else:
        assert driver.ASKED not in run["files"]
        assert held["outcome"] == "deny" and answered.get("is_error") is True
        assert text_of(answered).endswith(f"): {driver.OPERATOR_DENY}"), answered


def test_a_deny_rule_keeps_gemini_cli_from_overwriting_the_file(
    runs: dict[str, Any], stored: TestClient
) -> None:
    run = runs["gemini"]
    assert run["exit"] == 0, run["stderr"]
    assert driver.FINAL_TEXT in run["stdout"]
    assert run["guarded"] == driver.ORIGINAL  # its write_file never ran
    told = [i for i, body in enumerate(run["model_requests"]) if driver.DENY_REASON in body]
    assert told and told[0] == 1, told  # in the request right after the call
    denied = tool_dispatches(stored, session_of(stored, runs, "gemini"))[0]
    assert denied["tool_name"] == "write_file" and denied["outcome"] == "deny"
    assert policy_of(denied) == ("guarded-file", "enforce", "deny")


def test_the_log_verifies(runs: dict[str, Any]) -> None:
    harness.verify(runs["work"], driver.ADMIN_KEY)
