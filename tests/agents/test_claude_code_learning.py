"""The learning loop end to end with the real Claude Code CLI (2.1.328), offline.

claude_learning_run.py runs inside `unshare -n` (loopback only): `tachograph serve` on
SQLite with evolution on, the scripted Messages API stand-in and `claude -p` with hooks
from `tachograph hook install claude`. A first run fails the same shell command twice; the
lesson reflection makes of that turn must reach the model in a second run, and no longer
in a third run after its revision was reverted. The revision's deliveries must name
exactly the second run's session.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from domain.lifecycle import agent_session_uuid
from tests.agents import claude_learning_run, harness

pytestmark = pytest.mark.slow

DRIVER = Path(claude_learning_run.__file__)


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    work = tmp_path_factory.mktemp("claude-learning")
    found = harness.run_driver(DRIVER, work, "--claude", harness.agent_cli("claude"), timeout=300)
    assert found["standin_errors"] == []
    assert found.get("lesson") is not None, found
    return found


def model_text(run: dict[str, Any]) -> str:
    """Every string the CLI sent its model in a run, decoded, one per line."""
    found: list[str] = []

    def walk(value: Any) -> None:
        if isinstance(value, str):
            found.append(value)
        elif isinstance(value, dict):
            for item in value.values():
                walk(item)
        elif isinstance(value, list):
            for item in value:
                walk(item)

    walk(run["model_requests"])
    assert found, "the run sent its model nothing"
    return "\n".join(found)


def session_of(run: dict[str, Any]) -> str:
    assert run["exit"] == 0, run["stderr"]
    return str(agent_session_uuid(f"claude-code:{run['native_session']}"))


def test_a_failed_turn_becomes_a_signal_and_an_overlay_lesson(report: dict[str, Any]) -> None:
    lesson = report["lesson"]
    assert lesson["targetKind"] == "overlay" and lesson["agentId"] == "claude-code"
    status, signal = report["lesson_signal"]
    assert status == 200
    assert signal["kind"] == "failure"
    assert signal["sessionId"] == session_of(report["learn"])
    assert signal["goal"] == claude_learning_run.LEARN_PROMPT
    # The lesson cites its evidence and says what failed.
    assert signal["id"] in lesson["content"]
    assert "fixture database is missing" in lesson["content"]


def test_the_lesson_reaches_the_next_run_and_is_on_the_record(report: dict[str, Any]) -> None:
    lesson = report["lesson"]["content"]
    assert lesson in model_text(report["taught"])
    taught = session_of(report["taught"])
    sessions = {item["sessionId"] for item in report["deliveries_taught"]["items"]}
    assert sessions == {taught}
    assert all(
        item["contentDigest"] == report["lesson"]["contentDigest"]
        for item in report["deliveries_taught"]["items"]
    )


def test_after_a_revert_the_lesson_no_longer_reaches_the_model(report: dict[str, Any]) -> None:
    status, reverted = report["revert"]
    assert status in (200, 201), reverted
    after = report["after"]
    assert after["exit"] == 0, after["stderr"]
    assert report["lesson"]["content"] not in model_text(after)
    # The deliveries of the reverted revision did not grow: only the second run had it.
    sessions = {item["sessionId"] for item in report["deliveries_after"]["items"]}
    assert sessions == {session_of(report["taught"])}
