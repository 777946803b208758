"""Learned content reaches every runtime that takes context (both stores): Codex, Gemini CLI
and Copilot CLI are told their own agent's lessons at session start and with each prompt,
Cline with its first tool results, in their own answer format, and each such dispatch
lists the lesson among its deliveries.
Claude Code and Coder: test_learned_delivery.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.autonomy.conftest import Driven, enable
from tests.autonomy.test_learned_delivery import deliveries, learn

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"

# runtime: its agent id, and its captured SessionStart and prompt hooks with their routes.
RUNTIMES: dict[str, tuple[str, list[tuple[str, str]]]] = {
    "codex": (
        "codex",
        [
            ("codex/basic/01-SessionStart.json", "/hooks/codex"),
            ("codex/basic/02-UserPromptSubmit.json", "/hooks/codex"),
        ],
    ),
    "gemini": (
        "gemini-cli",
        [
            ("gemini/basic/01-SessionStart.json", "/hooks/gemini/SessionStart"),
            ("gemini/basic/02-BeforeAgent.json", "/hooks/gemini/BeforeAgent"),
        ],
    ),
    "copilot": (
        "copilot-cli",
        [
            ("copilot/basic/01-sessionStart.json", "/hooks/copilot/sessionStart"),
            ("copilot/basic/02-userPromptSubmitted.json", "/hooks/copilot/userPromptSubmitted"),
        ],
    ),
    # Cline reads no answer at session start or with a prompt: it is told with the
    # results of a run's first model iteration (this capture's `iteration` is 1).
    "cline": ("cline", [("cline/basic/03-PostToolUse.json", "/hooks/cline/PostToolUse")]),
}


def strings_of(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for item in value.values() for s in strings_of(item)]
    if isinstance(value, list):
        return [s for item in value for s in strings_of(item)]
    return []


@pytest.mark.parametrize("runtime", sorted(RUNTIMES))
def test_each_runtime_is_told_its_own_agents_lessons(driven: Driven, runtime: str) -> None:
    api = driven.client
    enable(api, evolution=True)
    agent, hooks = RUNTIMES[runtime]
    own = learn(driven, agent, "own", f"{runtime}: the fixture database is missing")
    other = learn(driven, "claude-code", "other", "claude-code: the release branch is frozen")
    told = []
    for relative, route in hooks:
        payload = json.loads((FIXTURES / relative).read_text())
        response = api.post(route, json=payload)
        assert response.status_code == 200, response.text
        told.append("\n".join(strings_of(response.json())))
    for answer in told:
        assert own["content"] in answer
        assert other["content"] not in answer  # another agent's lesson is not this one's
    listed = deliveries(api, own["id"])
    assert listed["count"] == len(hooks)
    assert {item["contentDigest"] for item in listed["items"]} == {own["contentDigest"]}
    assert len({item["sessionId"] for item in listed["items"]}) == 1
    assert deliveries(api, other["id"])["count"] == 0
