"""The real Claude Code CLI (2.1.328), governed offline by a `tachograph serve` that exports
each hook decision as an OpenTelemetry span to a stand-in collector (claude_otel_run.py).

Claude Code is started with a W3C TRACEPARENT, as a caller tracing its own work hands it
one; its command hooks inherit it and the command hook client forwards it, so every
decision span is a child of the caller's span. (Claude Code's own tracing is off in this
offline setup: the context that reaches the hooks is the one it was started with.)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.agents import claude_otel_run, claude_run
from tests.agents.test_claude_code_hooks import EXPECTED_AUDIT, claude  # noqa: F401

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def report(claude: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:  # noqa: F811
    if subprocess.run(["unshare", "-n", "true"], capture_output=True).returncode != 0:
        pytest.fail("`unshare -n` does not work here: the real-CLI test runs only offline")
    work = tmp_path_factory.mktemp("claude-otel")
    inner = [sys.executable, str(Path(claude_otel_run.__file__)), "--work", str(work)]
    driven = subprocess.run(
        ["unshare", "-n", "sh", "-c", 'ip link set lo up && exec "$@"', "sh", *inner]
        + ["--claude", claude],
        cwd=ROOT,
        env=dict(os.environ),
        capture_output=True,
        text=True,
        timeout=240,
    )
    serve_log = (work / "serve.log").read_text() if (work / "serve.log").exists() else ""
    assert driven.returncode == 0, (driven.stdout, driven.stderr[-4000:], serve_log[-3000:])
    loaded: dict[str, Any] = json.loads((work / "report.json").read_text())
    return loaded


def test_each_decision_of_a_real_run_arrives_as_a_guardrail_span(report: dict[str, Any]) -> None:
    assert report["netns"] != os.readlink("/proc/self/ns/net")
    assert report["standin_errors"] == [] and report["command"]["exit"] == 0
    spans = sorted(report["spans"], key=lambda s: s["attributes"]["tachograph.log.position"])
    decided = [
        (s["attributes"]["tachograph.hook.event"], s["attributes"]["tachograph.decision.outcome"])
        for s in spans
    ]
    assert decided == [(event, outcome) for event, _, outcome in EXPECTED_AUDIT]
    native = report["command"]["native_session"]
    sessions = {s["attributes"]["gen_ai.conversation.id"] for s in spans}
    assert len(sessions) == 1
    for span in spans:
        attributes = span["attributes"]
        assert span["name"] == "apply_guardrail Tachograph"
        assert attributes["gen_ai.operation.name"] == "apply_guardrail"
        assert attributes["gen_ai.agent.name"] == "claude-code"
        assert attributes["tachograph.agent.session_id"] == native
        assert attributes["tachograph.log.recorded"] is True
        assert len(attributes["tachograph.log.link"]) == 64
        # The caller's trace, through Claude Code and the command hook.
        assert span["trace_id"] == claude_otel_run.CALLER_TRACE
        assert span["parent_span_id"] == claude_otel_run.CALLER_SPAN
    tools = [
        s["attributes"] for s in spans if s["attributes"]["tachograph.hook.event"] == "PreToolUse"
    ]
    denied, rewritten, passed = tools
    assert denied["gen_ai.security.decision.type"] == "deny"
    assert denied["gen_ai.security.policy.id"] == "shell-policy"
    assert denied["gen_ai.security.decision.reason"] == claude_run.DENY_REASON
    assert denied["gen_ai.security.target.type"] == "tool_call"
    assert denied["gen_ai.tool.name"] == "Bash"
    assert denied["tachograph.tool_call.id"].startswith("toolu_")
    assert rewritten["gen_ai.security.decision.type"] == "modify"
    assert passed["gen_ai.security.decision.type"] == "allow"
    assert "gen_ai.security.policy.id" not in passed
    turns = {s["attributes"].get("tachograph.turn.id") for s in spans} - {None}
    assert turns  # the turn each decision belongs to
