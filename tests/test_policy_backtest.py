"""Backtests through the HTTP API and the CLI (both stores): a candidate document tried
against the calls real Claude Code hooks recorded, reporting what it would have changed
and the calls whose facts were cut, and recording nothing but who ran which digest."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from bootstrap import build_services
from domain.policy.document import digest
from infra.settings import Settings
from services import policy_backtest
from tests.support import run_cli
from tests.test_agent_adapters_api import claude_session
from tests.test_policy_api import decision_of, pre_tool_use, record

CANDIDATE = """
version: 1
rules:
  - id: no-force-push
    when: command.git.exists(g, g.op == "push" && g.force)
    then: deny
  - id: ssh-keys
    when: paths.exists(p, p.contains("/.ssh/"))
    then: deny
    mode: shadow
  - id: ask-rm
    when: command.commands.exists(c, c.program == "rm")
    then: ask
  - id: tests-hint
    on: [PreToolUse]
    when: tool == "Bash" && input.command.startsWith("pytest")
    then: context
    context: Run the tests with -q.
  - id: prompts
    on: [UserPromptSubmit]
    when: prompt.contains("deploy")
    then: context
    context: Deploys go through the pipeline.
"""


def read_file(session: str, path: str) -> dict[str, Any]:
    return {
        **pre_tool_use(session, ""),
        "tool_name": "Read",
        "tool_input": {"file_path": path},
    }


def prompt(session: str, text: str) -> dict[str, Any]:
    return {
        "session_id": session,
        "transcript_path": "/tmp/t.jsonl",
        "cwd": "/work/repo",
        "hook_event_name": "UserPromptSubmit",
        "prompt": text,
    }


def history(client: TestClient) -> str:
    """Calls as an agent made them: two force pushes (one nested in bash -c), plain work,
    a key read, a recursive delete, a test run, a prompt, and a command too long to keep."""
    session = str(uuid.uuid4())
    calls = [
        pre_tool_use(session, "git push --force origin main"),
        pre_tool_use(session, "bash -c 'git push -f origin HEAD'"),
        pre_tool_use(session, "git status"),
        pre_tool_use(session, "git status"),  # a repeat: judged from the kept verdict
        read_file(session, "/home/dev/.ssh/id_ed25519"),
        pre_tool_use(session, "rm -rf build"),
        pre_tool_use(session, "pytest tests"),
        prompt(session, "please deploy the app"),
        pre_tool_use(session, "echo " + "x" * 9000),  # its input is cut at 8 KiB
    ]
    for call in calls:
        assert client.post("/hooks/claude", json=call).status_code == 200
    return claude_session({"session_id": session})


def backtest(client: TestClient, **body: Any) -> dict[str, Any]:
    response = client.post("/api/policy/backtest", json={"source": CANDIDATE, **body})
    assert response.status_code == 200, response.text
    report: dict[str, Any] = response.json()
    return report


def log(client: TestClient) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = client.get("/api/events", params={"limit": 500}).json()["events"]
    return found


def events(client: TestClient, kind: str) -> list[dict[str, Any]]:
    found = client.get("/api/events", params={"type": kind, "limit": 500}).json()["events"]
    return [e["data"] for e in found]


def test_a_backtest_reports_what_the_candidate_would_have_changed(client: TestClient) -> None:
    session = history(client)
    head = log(client)[-1]["position"]

    report = backtest(client)

    # Nine calls on events the rules are on; the one with a cut input is not guessed.
    assert report["evaluated"] == 8 and report["unjudged"] == 1
    assert report["unjudgedBy"] == {"noFacts": 0, "redactedInput": 0, "truncated": 1}
    # Both force pushes would be denied, the delete held, the test run and the prompt
    # given context; the shadow rule changes nothing.
    assert report["changed"] == {"deny": 2, "ask": 1, "context": 2}
    rules = {rule["id"]: rule for rule in report["rules"]}
    assert {rule_id: rule["hits"] for rule_id, rule in rules.items()} == {
        "no-force-push": 2,
        "ssh-keys": 1,
        "ask-rm": 1,
        "tests-hint": 1,
        "prompts": 1,
    }
    pushes = rules["no-force-push"]["examples"]
    assert [e["summary"] for e in pushes] == [
        "git push --force origin main",
        "bash -c 'git push -f origin HEAD'",
    ]
    assert {e["sessionId"] for e in pushes} == {session}
    assert {e["decision"] for e in pushes} == {"pass"}
    assert pushes[0]["position"] < pushes[1]["position"] <= head
    assert rules["ssh-keys"]["mode"] == "shadow"
    assert rules["ssh-keys"]["examples"][0]["summary"] == "/home/dev/.ssh/id_ed25519"
    assert rules["prompts"]["examples"][0]["summary"] == "please deploy the app"
    assert report["digest"] == "sha256:" + digest(CANDIDATE)

    # Nothing is recorded but who ran which digest over which window.
    after = log(client)
    assert [e["type"] for e in after if e["position"] > head] == ["PolicyBacktest.Created"]
    (audit,) = events(client, "PolicyBacktest.Created")
    assert audit["digest"] == report["digest"] and audit["evaluated"] == 8
    assert audit["unjudged"] == 1 and audit["workspace_id"] is None
    assert audit["actor"]
    assert client.get("/api/policy").json()["items"] == []


def test_a_call_the_active_policy_already_decided_is_not_counted_as_changed(
    client: TestClient,
) -> None:
    revision = record(client, CANDIDATE)
    client.post(f"/api/policy/revisions/{revision['id']}/activate")
    session = str(uuid.uuid4())
    denied = client.post("/hooks/claude", json=pre_tool_use(session, "git push -f origin main"))
    assert decision_of(denied)[0] == "deny"
    client.post("/hooks/claude", json=pre_tool_use(session, "pytest -x"))

    report = backtest(client)
    assert report["evaluated"] == 2
    # The push was denied, the test run given the same context: nothing would change.
    assert report["changed"] == {"deny": 0, "ask": 0, "context": 0}
    rules = {rule["id"]: rule for rule in report["rules"]}
    assert rules["no-force-push"]["examples"][0]["decision"] == "deny"


def test_the_window_and_the_workspace_choose_the_calls(client: TestClient) -> None:
    history(client)
    now = datetime.now(UTC)
    assert backtest(client, since=(now - timedelta(hours=1)).isoformat())["evaluated"] == 8
    assert backtest(client, since=(now + timedelta(hours=1)).isoformat())["evaluated"] == 0
    assert backtest(client, until=(now - timedelta(hours=1)).isoformat())["evaluated"] == 0
    assert backtest(client, workspaceId="default")["evaluated"] == 8


def test_a_bad_request_names_what_is_wrong_and_records_nothing(client: TestClient) -> None:
    history(client)
    cases = [
        ({"source": "version: 1\nrules:\n  - {id: typo, when: 'toool', then: deny}\n"}, 422),
        ({"source": CANDIDATE, "workspaceId": "nowhere"}, 404),
        ({"source": CANDIDATE, "since": "yesterday"}, 422),
        ({"source": CANDIDATE, "until": "2026-13-01T00:00Z"}, 422),
        ({"source": CANDIDATE, "since": "2026-12-02T00:00Z", "until": "2026-12-01T00:00Z"}, 422),
        ({"source": CANDIDATE, "extra": True}, 422),
    ]
    for body, status in cases:
        response = client.post("/api/policy/backtest", json=body)
        assert response.status_code == status, (body, response.text)
    refused = client.post("/api/policy/backtest", json=cases[0][0]).json()
    assert refused["ruleId"] == "typo" and "typo" in refused["message"]
    assert events(client, "PolicyBacktest.Created") == []


FAILING_ON_SOME = """
version: 1
rules:
  - id: pushes
    when: input.command.startsWith("git push")
    then: deny
    onError: skip
  - id: ssh-keys
    when: paths.exists(p, p.contains("/.ssh/"))
    then: deny
  - id: deletes
    when: command.commands.exists(c, c.program == "rm")
    then: ask
"""


def test_a_rule_failing_on_a_call_is_that_rule_s_failure_alone(client: TestClient) -> None:
    """The rules of a call are evaluated in one pass; when one fails on a call (a Read
    has no `input.command`), each is evaluated alone: the others still hit."""
    history(client)
    response = client.post("/api/policy/backtest", json={"source": FAILING_ON_SOME})
    assert response.status_code == 200, response.text
    rules = {rule["id"]: rule for rule in response.json()["rules"]}
    assert {rule_id: (rule["hits"], rule["errors"]) for rule_id, rule in rules.items()} == {
        "pushes": (1, 1),  # `git push --force …`; it failed on the Read, skipped there
        "ssh-keys": (1, 0),  # the Read it failed on
        "deletes": (1, 0),
    }
    assert response.json()["changed"] == {"deny": 2, "ask": 1, "context": 0}


def test_worker_processes_report_what_one_process_does(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    with TestClient(create_app(settings), raise_server_exceptions=False) as client:
        for _ in range(3):
            history(client)
    monkeypatch.setattr(policy_backtest, "CHUNK", 4)  # several chunks, in several processes
    monkeypatch.setattr(policy_backtest, "PAGE", 7)  # the log read in windows of 7 positions
    services = build_services(settings)
    try:
        services.runner.catch_up()
        one, two = (
            policy_backtest.run_backtest(
                services.app,
                services.store,
                CANDIDATE,
                since=None,
                until=None,
                workspace_id=None,
                actor="key:test",
                workers=workers,
            )
            for workers in (1, 2)
        )
    finally:
        services.close()
    assert one["evaluated"] == 24 and one["changed"] == {"deny": 6, "ask": 3, "context": 6}
    assert (one["workers"], two["workers"]) == (1, 2)
    varying = ("id", "seconds", "workers", "evaluations")  # each process keeps its verdicts
    assert {k: v for k, v in two.items() if k not in varying} == {
        k: v for k, v in one.items() if k not in varying
    }


def test_policy_test_runs_a_file_against_the_record(settings: Settings, tmp_path: Path) -> None:
    with TestClient(create_app(settings), raise_server_exceptions=False) as client:
        history(client)
    candidate = tmp_path / "candidate.yaml"
    candidate.write_text(CANDIDATE)
    done = run_cli(settings, "policy", "test", str(candidate), "--since", "1d", "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["evaluated"] == 8 and report["changed"]["deny"] == 2

    done = run_cli(settings, "policy", "test", str(candidate), "--workspace", "default")
    assert done.returncode == 0, done.stderr
    assert "would deny 2" in done.stdout and "no-force-push" in done.stdout
    assert "git push --force origin main" in done.stdout

    candidate.write_text("version: 1\nrules:\n  - {id: typo, when: 'toool', then: deny}\n")
    done = run_cli(settings, "policy", "test", str(candidate))
    assert done.returncode == 2 and "typo" in done.stderr
    done = run_cli(settings, "policy", "test", str(tmp_path / "missing.yaml"))
    assert done.returncode == 2 and "missing.yaml" in done.stderr


@pytest.fixture
def client(settings: Settings) -> Iterator[TestClient]:
    with TestClient(create_app(settings), raise_server_exceptions=False) as test_client:
        yield test_client
