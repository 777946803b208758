"""One policy rule on every runtime's hook path (both stores): the same force push is denied
in each runtime's own answer format, whoever's tool names and payload shapes carry it,
and a plain push is not; the record names the rule under the runtime's agent."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from infra.settings import Settings
from tests.test_activity_facts import dispatches
from tests.test_approvals_runtimes import RUNTIMES, denied

RULE = """
version: 1
rules:
  - id: no-force-push
    when: command.git.exists(g, g.op == "push" && g.force)
    then: deny
    reason: Force-pushing rewrites shared history.
"""
AGENTS = {
    "codex": "codex",
    "gemini": "gemini-cli",
    "copilot": "copilot-cli",
    "qwen": "qwen-code",
    "droid": "factory-droid",
    "opencode": "opencode",
    "kilo": "kilo",
    "cline": "cline",
}


@pytest.fixture
def client(settings: Settings) -> Iterator[TestClient]:
    with TestClient(create_app(settings), raise_server_exceptions=False) as test_client:
        recorded = test_client.post("/api/policy/revisions", json={"source": RULE})
        assert recorded.status_code == 201, recorded.text
        revision = recorded.json()["id"]
        assert test_client.post(f"/api/policy/revisions/{revision}/activate").status_code == 200
        yield test_client


def test_every_runtime_has_a_column_here() -> None:
    assert sorted(AGENTS) == sorted(RUNTIMES)


@pytest.mark.parametrize("runtime", sorted(RUNTIMES))
def test_a_rule_denies_a_force_push_on_each_runtime(client: TestClient, runtime: str) -> None:
    route, body = RUNTIMES[runtime]("cd repo && git push --force origin main")
    answer = client.post(route, json=body)
    assert answer.status_code == 200, answer.text
    assert "Force-pushing rewrites shared history." in denied(runtime, answer.json())
    latest = _latest(client, runtime)
    assert latest["policy"]["rule_id"] == "no-force-push" and latest["outcome"] == "deny"

    route, body = RUNTIMES[runtime]("git push origin main")
    plain = client.post(route, json=body)
    assert plain.status_code == 200, plain.text
    assert _latest(client, runtime)["policy"] is None


def _latest(client: TestClient, runtime: str) -> dict[str, Any]:
    mine = [d for d in dispatches(client) if d["agent"] == AGENTS[runtime]]
    assert mine, runtime
    return mine[-1]
