"""The real Claude Code CLI (2.1.328) held on an approval through its hooks, offline.

claude_approval_run.py runs inside `unshare -n` with loopback only: `tachograph serve` on
SQLite with a `TACHOGRAPH_APPROVALS` rule (120 s) for the scripted Bash command, the
Messages API stand-in and `claude -p --allowedTools Bash` with hooks from `tachograph hook
install claude` run against serve, so they wait longer than the hold. The driver, as the
operator, finds the held call in the pending approvals while Claude Code waits, lets it
wait 15 s (longer than the hook client's own default of 10 s), then allows it (native
HTTP hooks, and command hooks) or denies it with a reason (HTTP hooks): each decision is
honoured and recorded as made. A last run's hook client is made to give up after 3 s:
Claude Code runs the call, the request is abandoned, a deny afterwards is refused, the
record says the call ran while awaiting approval, and `tachograph replay` finds no drift.
This test reads what the runs reported, and what serve stored through the app and
`tachograph verify`.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from domain.lifecycle import agent_session_uuid
from tests.agents import claude_approval_run as driver
from tests.agents import harness
from tests.agents.anthropic_standin import is_agent_loop, text_of, tool_results

pytestmark = pytest.mark.slow

DRIVER = Path(driver.__file__)
RUNS = list(driver.RUNS)
HOLD_S = 15.0
# What `hook install` writes from serve's longestHoldS (the rule's 120 s).
RUNTIME_WAIT_S, CLIENT_WAIT_S = 140, 135
# With --allowedTools Bash, Claude Code fires no PermissionRequest: the PreToolUse hook is
# the only place the call waits.
EXPECTED_AUDIT = {
    "allowed": [
        ("SessionStart", None, "pass"),
        ("UserPromptSubmit", None, "pass"),
        ("PreToolUse", f"approval:{driver.RULE_ID}", "pass"),
        ("PostToolUse", None, "pass"),
        ("PostToolBatch", None, "pass"),
        ("MessageDisplay", None, "pass"),
        ("Stop", None, "pass"),
        ("SessionEnd", None, "pass"),
    ],
    "denied": [
        ("SessionStart", None, "pass"),
        ("UserPromptSubmit", None, "pass"),
        ("PreToolUse", f"approval:{driver.RULE_ID}", "deny"),
        ("PostToolBatch", None, "pass"),
        ("MessageDisplay", None, "pass"),
        ("Stop", None, "pass"),
        ("SessionEnd", None, "pass"),
    ],
}
EXPECTED_AUDIT["command_allowed"] = EXPECTED_AUDIT["allowed"]
HOOK_TYPES = {"allowed": "http", "denied": "http", "command_allowed": "command"}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    claude = harness.agent_cli("claude")
    work = tmp_path_factory.mktemp("claude-approval")
    report = harness.run_driver(
        DRIVER, work, "--claude", claude, "--hold-s", str(HOLD_S), timeout=600
    )
    report["work"] = work
    return report


@pytest.fixture(scope="module")
def stored(runs: dict[str, Any]) -> Iterator[TestClient]:
    with harness.stored(runs["work"], driver.ADMIN_KEY) as client:
        yield client


def completed(run: dict[str, Any]) -> dict[str, Any]:
    """Claude Code's `--output-format json` result of a run that finished normally."""
    assert run["exit"] == 0, run["stderr"]
    result: dict[str, Any] = json.loads(run["stdout"])
    assert result["subtype"] == "success" and result["is_error"] is False, result
    assert result["result"] == driver.FINAL_TEXT
    return result


def agent_requests(run: dict[str, Any]) -> list[dict[str, Any]]:
    return [body for body in run["model_requests"] if is_agent_loop(body)]


def session_of(run: dict[str, Any]) -> str:
    return str(agent_session_uuid(f"claude-code:{run['native_session']}"))


def held_dispatch(stored: TestClient, run: dict[str, Any]) -> dict[str, Any]:
    items = stored.get(f"/api/sessions/{session_of(run)}/hooks").json()["items"]
    (held,) = [i for i in items if i["handlerId"] == f"approval:{driver.RULE_ID}"]
    return dict(held)


def test_everything_ran_offline_with_only_the_agent_token(runs: dict[str, Any]) -> None:
    assert runs["standin_errors"] == []
    for name in RUNS:
        run = runs[name]
        assert {p.split("?")[0] for p in run["model_paths"]} == {"POST /v1/messages"}, run
        assert "TACHOGRAPH_AGENT_TOKEN" in run["agent_env"]
        assert "TACHOGRAPH_API_KEY" not in run["agent_env"]
        assert driver.ADMIN_KEY not in json.dumps(run["model_requests"])
        pre_tool_use = run["settings"]["hooks"]["PreToolUse"]
        (hook,) = [h for group in pre_tool_use for h in group["hooks"]]
        assert hook["type"] == HOOK_TYPES[name]


@pytest.mark.parametrize("name", RUNS)
def test_hook_install_wrote_waits_longer_than_the_servers_hold(
    runs: dict[str, Any], name: str
) -> None:
    (hook,) = [h for g in runs[name]["installed"]["hooks"]["PreToolUse"] for h in g["hooks"]]
    assert hook["timeout"] == RUNTIME_WAIT_S
    if hook["type"] == "command":
        assert f"TACHOGRAPH_HOOK_TIMEOUT_S={CLIENT_WAIT_S} " in hook["command"]


@pytest.mark.parametrize("name", RUNS)
def test_claude_code_waited_on_its_hook_until_the_operator_decided(
    runs: dict[str, Any], name: str
) -> None:
    operator = runs[name]["operator"]
    request = operator["request"]
    assert request is not None, runs[name]["stderr"]
    assert request["status"] == "pending" and request["ruleId"] == driver.RULE_ID
    assert request["agent"] == "claude-code" and request["toolName"] == "Bash"
    assert request["inputSummary"] == driver.COMMAND
    # After the operator's pause, the CLI was still blocked and the command had not run.
    waiting = operator["before_decision"]
    assert waiting["cli_running"] is True and waiting["marker_made"] is False
    assert waiting["still_pending"] == [request["id"]]
    assert waiting["seconds_left"] < request["secondsLeft"]
    assert operator["held_s"] >= HOLD_S
    assert operator["decide_status"] == 200, operator["decided"]


@pytest.mark.parametrize("name", ["allowed", "command_allowed"])
def test_an_allowed_call_runs_and_the_audit_says_who_allowed_it(
    runs: dict[str, Any], stored: TestClient, name: str
) -> None:
    run = runs[name]
    completed(run)
    assert driver.MARKER in run["files"]
    ran = tool_results(agent_requests(run)[-1])[-1]
    assert ran.get("is_error") is not True, ran
    held = held_dispatch(stored, run)
    approval = run["operator"]["request"]["id"]
    assert held["outcome"] == "pass"
    assert held["reason"] == f"allowed by key:admin (approval {approval}): {driver.ALLOW_REASON}"
    assert held["durationMs"] >= HOLD_S * 1000  # the hook request itself was held open


def test_a_denied_call_never_runs_and_the_model_hears_the_operators_reason(
    runs: dict[str, Any], stored: TestClient
) -> None:
    run = runs["denied"]
    result = completed(run)
    assert driver.MARKER not in run["files"]
    (denial,) = result["permission_denials"]
    assert denial["tool_input"]["command"] == driver.COMMAND
    approval = run["operator"]["request"]["id"]
    why = f"Denied by key:admin (approval {approval}): {driver.DENY_REASON}"
    first, following = agent_requests(run)
    assert driver.DENY_REASON not in json.dumps(first)
    (refused,) = tool_results(following)
    assert refused.get("is_error") is True, refused
    assert text_of(refused) == f"PreToolUse:Bash hook error: {why}"
    held = held_dispatch(stored, run)
    assert (held["outcome"], held["reason"]) == ("deny", why)
    assert held["durationMs"] >= HOLD_S * 1000


@pytest.mark.parametrize("name", RUNS)
def test_the_audit_and_timeline_show_the_held_call(
    runs: dict[str, Any], stored: TestClient, name: str
) -> None:
    session_id = session_of(runs[name])
    items = stored.get(f"/api/sessions/{session_id}/hooks").json()["items"]
    assert [(i["event"], i["handlerId"], i["outcome"]) for i in items] == EXPECTED_AUDIT[name]
    assert not (runs["work"] / name / "hook-client" / "hooks.log").exists()
    (turn,) = stored.get(f"/api/sessions/{session_id}/timeline").json()["items"]
    verdict = {
        "allowed": ("pass", "ok"),
        "denied": ("deny", "denied"),
        "command_allowed": ("pass", "ok"),
    }[name]
    assert [(c["tool"], c["summary"], c["decision"], c["status"]) for c in turn["calls"]] == [
        ("Bash", driver.COMMAND, *verdict)
    ]


def test_the_approval_rows_show_who_decided_and_how(
    runs: dict[str, Any], stored: TestClient
) -> None:
    rows = {row["id"]: row for row in stored.get("/api/approvals").json()["items"]}
    assert len(rows) == len(RUNS) + 1  # and the one abandoned
    assert stored.get("/api/approvals", params={"status": "pending"}).json()["items"] == []
    for name, (verdict, reason) in driver.RUNS.items():
        run = runs[name]
        row = rows[run["operator"]["request"]["id"]]
        assert row["sessionId"] == session_of(run)
        assert (row["status"], row["decision"], row["decidedBy"], row["reason"]) == (
            "decided",
            verdict,
            "key:admin",
            reason,
        )
        assert row["secondsLeft"] is None and row["settledAt"] > row["requestedAt"]
        assert run["operator"]["decided"] == row  # what the decide call answered


def test_a_client_that_gave_up_leaves_a_record_of_a_call_that_ran_undecided(
    runs: dict[str, Any], stored: TestClient
) -> None:
    run = runs[driver.GAVE_UP]
    completed(run)
    assert driver.MARKER in run["files"]  # Claude Code went on without a decision
    operator = run["operator"]
    request = operator["request"]
    assert request is not None, run["stderr"]
    assert operator["settled"]["status"] == "abandoned"
    assert operator["settled"]["decision"] is None
    # Deciding afterwards is refused, naming why; the record is not relabelled.
    assert operator["decide_status"] == 409, operator["decided"]
    assert "abandoned" in operator["decided"]["message"]
    row = stored.get(f"/api/approvals/{request['id']}").json()
    assert row["status"] == "abandoned"
    session_id = session_of(run)
    (turn,) = stored.get(f"/api/sessions/{session_id}/timeline").json()["items"]
    (call,) = turn["calls"]
    assert (call["decision"], call["handlerId"], call["status"]) == (
        "ask",
        "approval:abandoned",
        "ran_undecided",
    )
    assert call["bytes"] is not None
    (activity,) = [
        item
        for item in stored.get("/api/activity", params={"sessionId": session_id}).json()["items"]
        if item["tool"] == "Bash"
    ]
    assert activity["status"] == "ran_undecided" and activity["decision"] != "deny"


def test_replay_finds_no_drift_after_every_run(runs: dict[str, Any]) -> None:
    replayed = runs["replay"]
    assert replayed["exit"] == 0, replayed["stdout"]
    assert "DRIFT" not in replayed["stdout"]


def test_the_log_verifies(runs: dict[str, Any]) -> None:
    harness.verify(runs["work"], driver.ADMIN_KEY)
