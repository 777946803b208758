"""Usage from the real Claude Code (2.1.328), Gemini CLI and Codex, offline, through
their own OpenTelemetry export.

usage_run.py runs inside `unshare -n` (loopback only): `tachograph serve` with an admin
key, the CLIs with their hooks installed and their OTLP export pointed at serve with an
agent token, each against its model API stand-in. Claude Code runs twice, exporting as
`http/json` and as `http/protobuf`. What is honestly checkable:

- tokens: the session's input, output, cache-read and cache-creation tokens equal the
  sums of what the stand-in reported in its responses' `usage` (different figures in
  every response, so a match is no coincidence);
- cost: the stand-in reports no price, Claude Code computes the cost from its own price
  table; the session's cost equals the `total_cost_usd` Claude Code itself reports for
  the run, and is not zero. Gemini CLI and Codex report no cost: 0;
- one session per run: the telemetry lands in the session the hooks created (its hooks'
  timeline is there), and the run's requests show on its turn.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from tests.agents import harness, usage_run

pytestmark = pytest.mark.slow

PROTOCOLS = ["http/json", "http/protobuf"]


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    clis = {name: harness.agent_cli(name) for name in ("claude", "gemini", "codex")}
    work: Path = tmp_path_factory.mktemp("usage")
    flags = [part for name, binary in clis.items() for part in (f"--{name}", binary)]
    return harness.run_driver(Path(usage_run.__file__), work, *flags, timeout=400)


def summed(reported: list[dict[str, int]], *keys: str) -> int:
    return sum(usage.get(key, 0) for usage in reported for key in keys)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_claude_codes_session_carries_what_the_model_api_reported(
    report: dict[str, Any], protocol: str
) -> None:
    run = report[protocol]
    assert run["exit"] == 0, run["stderr"]
    reported = run["standin_usage"]
    assert len(reported) >= 2  # the tool call's turn and the final answer
    session = run["session"]
    assert session is not None and session["agent"] == "claude-code"
    assert session["agentSessionId"] == run["native_session"]
    usage = session["usage"]
    assert usage == {
        "requests": len(reported),
        "inputTokens": summed(reported, "input_tokens"),
        "outputTokens": summed(reported, "output_tokens"),
        "cacheReadTokens": summed(reported, "cache_read_input_tokens"),
        "cacheCreationTokens": summed(reported, "cache_creation_input_tokens"),
        "costUsd": pytest.approx(run["cli_cost_usd"], abs=1e-9),
    }
    assert usage["costUsd"] > 0
    # Claude Code's own account of the run agrees on the tokens.
    assert run["cli_usage"]["input_tokens"] == usage["inputTokens"]
    assert run["cli_usage"]["output_tokens"] == usage["outputTokens"]


def test_the_receivers_own_process_took_the_protobuf_runs_export(report: dict[str, Any]) -> None:
    """TACHOGRAPH_OTLP_PORT: that run's usage (checked above) came through the receiver's
    own process, which counted its records; the JSON run's went to serve's port."""
    assert report["http/protobuf"]["otlp_url"] != report["http/json"]["otlp_url"]
    recorded = re.search(
        r'tachograph_otlp_records_total\{outcome="recorded",signal="logs"\} ([0-9.]+)',
        report["receiver_metrics"],
    )
    assert recorded is not None
    assert float(recorded.group(1)) == len(report["http/protobuf"]["standin_usage"])


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_the_runs_turn_shows_its_model_requests(report: dict[str, Any], protocol: str) -> None:
    run = report[protocol]
    turns = run["timeline"]
    assert [len(turn["modelRequests"]) for turn in turns] == [len(run["standin_usage"])]
    (turn,) = turns
    assert turn["prompt"] is not None and turn["usage"] == run["session"]["usage"]
    assert {r["promptId"] for r in turn["modelRequests"]} != {None}


def test_gemini_clis_session_carries_what_the_model_api_reported(report: dict[str, Any]) -> None:
    run = report["gemini"]
    assert run["exit"] == 0, run["stderr"]
    reported = run["standin_usage"]
    assert len(reported) >= 2
    session = run["session"]
    assert session is not None and session["agent"] == "gemini-cli"
    assert session["usage"] == {
        "requests": len(reported),
        "inputTokens": summed(reported, "input_tokens"),
        "outputTokens": summed(reported, "output_tokens"),
        "cacheReadTokens": 0,
        "cacheCreationTokens": 0,
        "costUsd": 0.0,
    }
    # Gemini CLI's own count (its JSON result's stats) agrees.
    assert run["cli_tokens"] == [session["usage"]["inputTokens"], session["usage"]["outputTokens"]]
    # Its traces export was taken too: nothing failed on the way out.
    assert "/v1/traces" not in run["stderr"] and "code: 404" not in run["stderr"]


def test_codexs_session_carries_what_the_model_api_reported(report: dict[str, Any]) -> None:
    run = report["codex"]
    assert run["exit"] == 0, run["stderr"]
    reported = run["standin_usage"]
    assert len(reported) == 1  # the one answer of a text-only turn
    session = run["session"]
    assert session is not None and session["agent"] == "codex" and session["status"] == "ended"
    usage = session["usage"]
    assert usage == {
        "requests": 1,
        "inputTokens": summed(reported, "input_tokens"),
        "outputTokens": summed(reported, "output_tokens"),
        "cacheReadTokens": 0,
        "cacheCreationTokens": 0,
        "costUsd": 0.0,
    }
    # Codex's own count, printed at the end of the run.
    total = usage["inputTokens"] + usage["outputTokens"]
    assert f"tokens used\n{total}" in run["stdout"] + run["stderr"]


def test_usage_by_agent_sums_the_runs(report: dict[str, Any]) -> None:
    by_agent = {item["key"]: item for item in report["by_agent"]}
    claude = [report[p]["session"]["usage"] for p in PROTOCOLS]
    assert by_agent["claude-code"]["requests"] == sum(u["requests"] for u in claude)
    assert by_agent["claude-code"]["costUsd"] == pytest.approx(sum(u["costUsd"] for u in claude))
    assert by_agent["gemini-cli"]["requests"] == report["gemini"]["session"]["usage"]["requests"]
