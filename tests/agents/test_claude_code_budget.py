"""A budget rule stops the real Claude Code 2.1.328 once the spend it reported crosses the
limit (offline, inside `unshare -n`).

budget_run.py runs `tachograph serve` on SQLite with a policy document whose one rule
denies every tool call once the workspace spent more than budget_run.LIMIT_USD today,
and `claude -p` with native HTTP hooks and its OpenTelemetry logs exported to serve.
The scripted model's first answer (touch SPENT_FIRST) reports usage Claude Code prices
above the limit, and ends only once that call ran (Claude Code runs a streamed tool
call as soon as its block is complete); its second (touch SPENT_AFTER) comes once serve
shows the spend. The first call runs, the second is refused with the rule's reason, the
model is told, and the session carries the spend.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.agents import budget_run as driver
from tests.agents import harness
from tests.agents.anthropic_standin import text_of, tool_results
from tests.agents.policy_run import ADMIN_KEY
from tests.agents.test_policy_runtimes import policy_of
from tests.test_activity_facts import dispatches

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    work = tmp_path_factory.mktemp("budget")
    claude = harness.agent_cli("claude")
    report = harness.run_driver(Path(driver.__file__), work, "--claude", claude, timeout=300)
    report["work"] = work
    return report


@pytest.fixture(scope="module")
def stored(runs: dict[str, Any]) -> Iterator[TestClient]:
    with harness.stored(runs["work"], ADMIN_KEY) as client:
        yield client


def test_the_budget_stops_the_call_after_the_spend_crossed_it(
    runs: dict[str, Any], stored: TestClient
) -> None:
    assert runs["revision"]["activated"] == 200
    run = runs["claude"]
    assert run["exit"] == 0, run["stderr"]
    assert run["standin_errors"] == []
    assert json.loads(run["stdout"])["result"] == driver.FINAL_TEXT
    # The first call ran before its response ended, so before Claude Code could report
    # that response's cost; the stand-in answered the second request only once serve
    # showed the spend.
    assert run["first_ran_mid_stream"] is True
    assert run["waited"]["spend"] > driver.LIMIT_USD, run["waited"]
    assert driver.SPENT_FIRST in run["files"]
    assert driver.SPENT_AFTER not in run["files"]

    first, second, third = [json.loads(body) for body in run["model_requests"]]
    assert tool_results(first) == []
    (ran,) = tool_results(second)
    assert ran.get("is_error") is not True, ran
    refused = tool_results(third)[-1]
    assert refused.get("is_error") is True, refused
    assert text_of(refused) == f"PreToolUse:Bash hook error: {driver.REASON}"

    calls = [d for d in dispatches(stored, run["session_id"]) if d["event_name"] == "PreToolUse"]
    assert [d["outcome"] for d in calls] == ["pass", "deny"]
    assert calls[0].get("policy") is None
    assert policy_of(calls[1]) == ("workspace-budget", "enforce", "deny")
    assert calls[1]["policy"]["revision_id"] == runs["revision"]["id"]

    # The session carries the spend Claude Code reported, past the limit.
    usage = run["session"]["usage"]
    assert usage["requests"] == len(run["standin_usage"]) == 3
    assert usage["inputTokens"] == sum(u["input_tokens"] for u in run["standin_usage"])
    assert usage["costUsd"] > driver.LIMIT_USD
