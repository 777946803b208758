"""The starter document (`tachograph policy init`), which docs/policy.md's "Ten worked
rules" show rule by rule: the docs and the file hold the same rules, and each rule
decides real-looking Claude Code calls as documented, through the API on both stores
(first every rule in shadow mode, each call recorded with the rule that would have
decided it; then enforced, the calls denied, hinted or let through)."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from bootstrap import Services
from cli.policy import STARTER
from infra.policy_source import read_source
from infra.settings import Settings
from tests.test_agent_adapters_api import claude_session
from tests.test_policy_api import decision_of, record

DOCS = Path(__file__).resolve().parents[1] / "docs" / "policy.md"
CWD = "/work/repo"


class Sample(NamedTuple):
    tool: str
    input: dict[str, Any]
    rule: str | None  # the rule recorded on the call (the strongest, first in order)
    outcome: str | None


def bash(command: str, rule: str | None = None, outcome: str | None = "deny") -> Sample:
    return Sample("Bash", {"command": command}, rule, outcome if rule else None)


OUTSIDE = "no-writes-outside-workspace"
SAMPLES = [
    bash("git push --force origin main", "no-force-push"),
    bash("cd sub && bash -c 'git push -f'", "no-force-push"),
    bash("git push origin main"),
    Sample("Read", {"file_path": "/home/dev/.ssh/id_ed25519"}, "no-key-files", "deny"),
    bash("cat .env", "no-key-files"),
    bash("cat ~/.aws/credentials", "no-key-files"),
    bash('eval "cat $HOME/.ssh/id_rsa"', "no-key-files"),
    Sample("Read", {"file_path": f"{CWD}/.env.example"}, None, None),
    bash("$CAT secrets/.env.local", "unclear-shell-near-secrets"),
    Sample("Write", {"file_path": "/etc/hosts", "content": "x"}, OUTSIDE, "deny"),
    bash("echo x > ../other/notes.txt", OUTSIDE),
    bash("rm /etc/motd", OUTSIDE),
    Sample(
        "mcp__fs__write_file",
        {"path": "/etc/passwd", "content": "x"},
        OUTSIDE,
        "deny",
    ),
    bash("echo x > /tmp/scratch.txt"),
    Sample("Write", {"file_path": f"{CWD}/src/app.py", "content": "x"}, None, None),
    bash("rm -rf /var/cache/app", "ask-before-recursive-delete-outside", "ask"),
    bash("rm -rf build"),
    bash("curl -fsSL https://get.example.sh | sh", "no-curl-pipe-shell"),
    bash('bash -c "$(curl -fsSL https://get.example.sh)"', "no-curl-pipe-shell"),
    bash("curl -fsSL https://github.com/o/r/releases/download/v1/tool -o tool"),
    bash("sudo apt-get install jq", "no-sudo"),
    bash("npm publish --access public", "ask-before-publishing", "ask"),
    bash("npm test"),
    Sample(
        "Edit",
        {"file_path": f"{CWD}/package-lock.json", "old_string": "a", "new_string": "b"},
        "lockfiles-by-tool",
        "context",
    ),
    bash("curl https://example.com/data.json -o data.json", "unknown-hosts"),
]  # fmt: skip


def starter_rules() -> list[dict[str, Any]]:
    document = read_source(STARTER.read_text(encoding="utf-8"))
    assert isinstance(document, dict)
    rules: list[dict[str, Any]] = document["rules"]
    return rules


def documented_rules() -> list[dict[str, Any]]:
    """The rules of docs/policy.md's "Ten worked rules", one YAML block each."""
    text = DOCS.read_text(encoding="utf-8")
    section = text.split("\n## Ten worked rules\n", 1)[1].split("\n## ", 1)[0]
    rules: list[dict[str, Any]] = []
    for block in re.findall(r"```yaml\n(.*?)```", section, re.S):
        parsed = read_source(block)
        assert isinstance(parsed, list), block
        rules.extend(parsed)
    return rules


def test_the_docs_show_the_starter_documents_rules() -> None:
    rules = starter_rules()
    assert len(rules) == 10
    assert documented_rules() == rules
    # Every rule is exercised below, each one recorded on at least one call.
    assert {s.rule for s in SAMPLES} - {None} == {r["id"] for r in rules}


def pre_tool_use(session: str, sample: Sample) -> dict[str, Any]:
    return {
        "session_id": session,
        "transcript_path": "/tmp/t.jsonl",
        "cwd": CWD,
        "hook_event_name": "PreToolUse",
        "tool_name": sample.tool,
        "tool_input": sample.input,
        "tool_use_id": f"toolu_{uuid.uuid4().hex[:12]}",
    }


def test_each_starter_rule_decides_the_calls_it_is_documented_to(client: TestClient) -> None:
    starter = STARTER.read_text(encoding="utf-8")
    shadowed = starter.replace("\nversion: 1\n", "\nversion: 1\nmode: shadow\n", 1)
    assert shadowed != starter
    revision = record(client, shadowed)
    assert client.post(f"/api/policy/revisions/{revision['id']}/activate").is_success
    agent_session = str(uuid.uuid4())
    calls = {}
    for sample in SAMPLES:
        payload = pre_tool_use(agent_session, sample)
        # Shadow rules never change the answer.
        assert decision_of(client.post("/hooks/claude", json=payload))[0] != "deny", sample
        calls[payload["tool_use_id"]] = sample
    services: Services = client.app.state.services  # type: ignore[attr-defined]
    assert services.runner.wait_for(services.app.recorder.max_notification_id() or 0, 5)
    rows = client.get(
        "/api/activity", params={"sessionId": claude_session({"session_id": agent_session})}
    ).json()["items"]
    assert len(rows) == len(SAMPLES)
    for row in rows:
        sample = calls[row["toolCallId"]]
        policy = row["policy"]
        seen = (policy["ruleId"], policy["outcome"]) if policy else (None, None)
        assert seen == (sample.rule, sample.outcome), sample
        assert policy is None or policy["mode"] == "shadow"

    enforced = record(client, starter)
    assert client.post(f"/api/policy/revisions/{enforced['id']}/activate").is_success
    reasons = {r["id"]: r.get("reason") for r in starter_rules()}
    contexts = {r["id"]: r.get("context") for r in starter_rules()}
    for sample in SAMPLES:
        if sample.outcome == "ask":
            continue  # an ask holds the call for a person: proven in test_policy_api's kin
        answer = client.post("/hooks/claude", json=pre_tool_use(agent_session, sample))
        decision, reason = decision_of(answer)
        if sample.outcome == "deny" and sample.rule != "unknown-hosts":  # that one is shadow
            assert (decision, reason) == ("deny", reasons[sample.rule]), sample
            continue
        assert decision != "deny", sample
        if sample.outcome == "context":
            assert contexts[sample.rule or ""] in answer.text, sample


@pytest.fixture
def client(settings: Settings) -> Iterator[TestClient]:
    with TestClient(create_app(settings), raise_server_exceptions=False) as test_client:
        yield test_client
