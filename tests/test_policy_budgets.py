"""Budgets a policy can enforce (both stores): a rule over `usage` reads the spend the
runtime reported through OpenTelemetry, and holds the workspace's next tool call once it
crosses the limit, whichever of the workspace's sessions spent it."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from infra.settings import Settings
from tests.test_policy_api import decision_of, pre_tool_use
from tests.test_usage_api import CLAUDE_LOGS, export_logs, start_claude_session, with_session

# The captured export reports two requests Claude Code priced at $0.0012 together.
BUDGET = """
version: 1
rules:
  - id: workspace-budget
    when: usage.workspace.today.costUsd > 0.001
    then: deny
    reason: This workspace spent its budget for today; ask an operator to raise it.
"""


def sent_now(export: dict[str, Any]) -> dict[str, Any]:
    """The export with its records' times moved to now, keeping their spacing."""
    times = ("timeUnixNano", "observedTimeUnixNano")

    def stamps(value: Any) -> Iterator[int]:
        if isinstance(value, dict):
            for k, v in value.items():
                yield from ([int(v)] if k in times and v else stamps(v))
        elif isinstance(value, list):
            for v in value:
                yield from stamps(v)

    shift = time.time_ns() - max(stamps(export))

    def moved(value: Any) -> Any:
        if isinstance(value, dict):
            return {
                k: str(int(v) + shift) if k in times and v else moved(v) for k, v in value.items()
            }
        if isinstance(value, list):
            return [moved(v) for v in value]
        return value

    now: dict[str, Any] = moved(export)
    return now


@pytest.fixture
def client(settings: Settings) -> Iterator[TestClient]:
    with TestClient(create_app(settings), raise_server_exceptions=False) as test_client:
        recorded = test_client.post("/api/policy/revisions", json={"source": BUDGET})
        assert recorded.status_code == 201, recorded.text
        revision = recorded.json()["id"]
        assert test_client.post(f"/api/policy/revisions/{revision}/activate").status_code == 200
        yield test_client


def test_a_budget_rule_stops_the_next_call_once_the_reported_spend_crosses_it(
    client: TestClient,
) -> None:
    spender, other = str(uuid.uuid4()), str(uuid.uuid4())
    start_claude_session(client, spender)
    start_claude_session(client, other)
    before = client.post("/hooks/claude", json=pre_tool_use(spender, "ls"))
    assert decision_of(before)[0] != "deny"

    # Sent today: the captured export's records are dated the day it was captured.
    export_logs(client, sent_now(with_session(CLAUDE_LOGS, spender)))
    # The figures follow the read model within about a second (docs/usage.md).
    deadline = time.monotonic() + 10
    while True:
        answer = client.post("/hooks/claude", json=pre_tool_use(spender, "ls"))
        decision, reason = decision_of(answer)
        if decision == "deny" or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert decision == "deny"
    assert reason == "This workspace spent its budget for today; ask an operator to raise it."
    # The budget is the workspace's: another session of the same workspace is stopped too.
    assert decision_of(client.post("/hooks/claude", json=pre_tool_use(other, "ls")))[0] == "deny"
