"""The rules reflector: one overlay lesson per failure pattern per agent, citing its evidence,
never learned from a turn that already had it (the pure policy, then the worker on both
stores)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from domain.learned_target import KEY_PATTERN, learned_target_id
from domain.reflection import Decision, RulesReflector, SignalEvidence, lesson_key
from tests.autonomy.conftest import Driven, enable, post_signal

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "claude-code"

# What the default workspace's evidence taught is that workspace's target.
DEFAULT = {"workspaceId": "default"}


def failure(
    text: str | None, failure_class: str | None = "tool_failure", **more: Any
) -> SignalEvidence:
    fields: dict[str, Any] = {
        "id": "6f1c3c2e-0000-4000-8000-000000000001",
        "agent_id": "claude-code",
        "trace_id": "session-1:turn-1",
        "kind": "failure",
        "goal": "Make the test suite pass",
        "outcome": None,
        "failure": text,
        "failure_class": failure_class,
    }
    return SignalEvidence(**{**fields, **more})


@pytest.mark.parametrize(
    ("one", "other"),
    [
        ("Bash failed 3 times: exit code 2", "Bash failed 5 times: exit code 127"),
        (
            "cat: /home/dev/app/src/main.py: No such file or directory",
            "cat: ./lib/util.py: No such file or directory",
        ),
        (
            "KeyError: 'user_42' in request 5b3f7c1e-2d4a-5e8f-9a61-7c0d2b4e8f13",
            'KeyError: "order" in request 0c1d2e3f-4a5b-4c6d-8e7f-001122334455',
        ),
        (
            "commit 3f786850e387 rejected by https://ci.example.com/run/1",
            "commit ab12cd34ef rejected by http://ci.internal/x",
        ),
        (
            'Traceback (most recent call last):\n  File "/app/x.py", line 3\nTimeoutError: 30s',
            'Traceback (most recent call last):\n  File "/srv/y.py", line 90\nTimeoutError: 5s',
        ),
        ("Request timed out after 30000 ms", "request TIMED OUT after 1.5 ms"),
    ],
)
def test_failures_that_differ_only_in_their_particulars_are_one_pattern(
    one: str, other: str
) -> None:
    assert lesson_key("tool_failure", one) == lesson_key("tool_failure", other)


def test_patterns_differ_by_class_and_by_what_failed() -> None:
    keys = {
        lesson_key("tool_failure", "Bash failed 3 times: exit code 2"),
        lesson_key("rate_limit", "Bash failed 3 times: exit code 2"),
        lesson_key("tool_failure", "Edit failed 3 times: old_string not found"),
        lesson_key("tool_failure", None),
        lesson_key(None, "Bash failed 3 times: exit code 2"),
    }
    assert len(keys) == 5


@pytest.mark.parametrize(
    ("failure_class", "text"),
    [
        ("rate_limit", "API Error: 429 rate limited, retry in 30s"),
        ("x" * 64, "y" * 2048),
        (None, "é" * 300),
        ("validation", "!!! ??? ..."),
        ("tool_failure", ""),
    ],
)
def test_lesson_keys_are_readable_bounded_and_valid(failure_class: str | None, text: str) -> None:
    key = lesson_key(failure_class, text)
    assert KEY_PATTERN.fullmatch(key) and key.startswith("lesson.") and len(key) <= 63
    assert key == lesson_key(failure_class, text)  # deterministic


def test_a_readable_key_names_the_class_and_the_failure() -> None:
    key = lesson_key("rate_limit", "API Error: 429 rate limited, retry in 30s")
    assert key.startswith("lesson.rate-limit-api-error-limited-retry")
    assert "429" not in key and "30s" not in key


def test_a_lesson_cites_its_evidence_and_is_taught_into_the_patterns_own_target() -> None:
    signal = failure("Bash failed 3 times: exit code 2")
    decision = RulesReflector().reflect(signal, [])
    assert (decision.strategy, decision.key) == (
        "overlay",
        lesson_key("tool_failure", signal.failure),
    )
    assert decision.content is not None
    assert decision.content.endswith(f"(evidence: signal {signal.id})")
    assert "Make the test suite pass" in decision.content and "(tool_failure)" in decision.content


def test_a_pattern_that_already_has_its_lesson_teaches_nothing_more() -> None:
    signal = failure("Bash failed 4 times: exit code 1")
    key = lesson_key("tool_failure", signal.failure)
    learned = [{"kind": "overlay", "key": key, "content": "Earlier work … (evidence: signal x)"}]
    assert RulesReflector().reflect(signal, learned) == Decision("none")
    # Another pattern's lesson, a skill under the same key, or a reverted (empty) lesson
    # leave this one to learn.
    for others in (
        [{"kind": "overlay", "key": lesson_key("rate_limit", "429"), "content": "x"}],
        [{"kind": "skill", "key": key, "content": "x"}],
        [{"kind": "overlay", "key": key, "content": None}],
    ):
        assert RulesReflector().reflect(signal, others).key == key


def test_a_turn_that_had_received_the_lesson_is_no_evidence_for_it() -> None:
    key = lesson_key("tool_failure", "Bash failed 2 times: exit code 2")
    had_it = str(learned_target_id("overlay", "claude-code", key))
    other = str(learned_target_id("overlay", "claude-code", "lesson.other-0000abcd"))
    received = failure("Bash failed 2 times: exit code 2", received=(other, had_it))
    assert RulesReflector().reflect(received, []) == Decision("none")
    # The same lesson id of another agent is another target.
    codex = failure("Bash failed 2 times: exit code 2", agent_id="codex", received=(had_it,))
    assert RulesReflector().reflect(codex, []).key == key
    assert RulesReflector().reflect(failure("Bash failed 2 times", received=(other,)), []).mutates


def test_outcomes_still_teach_skills_and_empty_evidence_teaches_nothing() -> None:
    outcome = failure(None, None, kind="outcome", outcome="Ran the migrations first")
    skill = RulesReflector().reflect(outcome, [])
    assert (skill.strategy, skill.key) == ("skill", "make-the-test-suite-pass")
    assert RulesReflector().reflect(failure(None, None), []) == Decision("none")


# Through the signal worker, on both stores


def reflect(driven: Driven) -> dict[str, int]:
    outcomes = driven.autonomy.reflect()
    driven.settled()
    return outcomes


def test_the_worker_learns_one_lesson_per_pattern_per_agent_citing_its_signal(
    driven: Driven,
) -> None:
    api = driven.client
    enable(api, evolution=True)
    sent = [
        ("claude", "a", "Bash failed 3 times: cat: /tmp/a.txt: No such file", "tool_failure"),
        ("claude", "b", "Bash failed 2 times: cat: ./b.txt: No such file", "tool_failure"),
        ("claude", "c", "API Error: 429 rate limited", "rate_limit"),
        ("codex", "d", "Bash failed 4 times: cat: /x/y.txt: No such file", "tool_failure"),
    ]
    signals = [
        post_signal(api, agentId=agent, traceId=trace, failure=text, failureClass=cls)
        for agent, trace, text, cls in sent
    ]
    assert reflect(driven) == {"completed": 4}
    rows = [api.get(f"/api/autonomy/signals/{s['id']}").json() for s in signals]
    assert [r["strategy"] for r in rows] == ["overlay", "none", "overlay", "overlay"]
    assert rows[1]["revisionId"] is None
    revisions = api.get("/api/autonomy/revisions").json()["items"]
    assert len(revisions) == 3
    by_signal = {r["signalId"]: r for r in revisions}
    for row in (rows[0], rows[2], rows[3]):
        revision = by_signal[row["id"]]
        assert revision["targetKind"] == "overlay" and revision["key"].startswith("lesson.")
        assert revision["content"].endswith(f"(evidence: signal {row['id']})")
        assert row["revisionId"] == revision["id"]
    bash = lesson_key("tool_failure", sent[0][2])
    assert by_signal[rows[0]["id"]]["key"] == by_signal[rows[3]["id"]]["key"] == bash
    targets = api.get("/api/autonomy/targets?kind=overlay&agentId=claude").json()["items"]
    assert sorted(t["key"] for t in targets) == sorted([bash, lesson_key("rate_limit", sent[2][2])])
    lesson = api.get(f"/api/autonomy/targets/overlay/claude/{bash}", params=DEFAULT).json()
    assert lesson["revisionCount"] == 1 and "/tmp/a.txt" in lesson["content"]

    # The same pattern again later: still the one lesson, nothing appended.
    again = post_signal(
        api,
        traceId="e",
        failure="Bash failed 9 times: cat: /z: No such file",
        failureClass="tool_failure",
    )
    assert reflect(driven) == {"completed": 1}
    assert api.get(f"/api/autonomy/signals/{again['id']}").json()["strategy"] == "none"
    assert (
        api.get(f"/api/autonomy/targets/overlay/claude/{bash}", params=DEFAULT).json()[
            "revisionCount"
        ]
        == 1
    )


def test_a_reverted_lesson_is_out_until_new_evidence_teaches_it_again(driven: Driven) -> None:
    api = driven.client
    enable(api, evolution=True)
    first = post_signal(
        api,
        traceId="a",
        failure="Edit failed 2 times: old_string not found",
        failureClass="tool_failure",
    )
    reflect(driven)
    revision_id = api.get(f"/api/autonomy/signals/{first['id']}").json()["revisionId"]
    key = lesson_key("tool_failure", "Edit failed 2 times: old_string not found")
    reverted = api.post(f"/api/autonomy/revisions/{revision_id}/revert")
    assert reverted.status_code == 200, reverted.text
    assert (
        api.get(f"/api/autonomy/targets/overlay/claude/{key}", params=DEFAULT).json()["content"]
        is None
    )
    later = post_signal(
        api,
        traceId="b",
        failure="Edit failed 3 times: old_string not found",
        failureClass="tool_failure",
    )
    assert reflect(driven) == {"completed": 1}
    relearned = api.get(f"/api/autonomy/signals/{later['id']}").json()
    assert relearned["strategy"] == "overlay" and relearned["revisionId"] != revision_id
    content = api.get(f"/api/autonomy/targets/overlay/claude/{key}", params=DEFAULT).json()[
        "content"
    ]
    assert content.endswith(f"(evidence: signal {later['id']})")
    assert first["id"] not in content


def claude(driven: Driven, name: str, session: str, **fields: Any) -> dict[str, Any]:
    """A real Claude Code hook payload, moved to `session`, posted as Claude Code posts it."""
    payload = json.loads((FIXTURES / name).read_text())["payload"]
    response = driven.client.post(
        "/hooks/claude", json={**payload, "session_id": session, **fields}
    )
    assert response.status_code == 200, response.text
    answer: dict[str, Any] = response.json() if response.content else {}
    return answer


def test_a_real_turn_that_had_the_lesson_does_not_teach_it_again(driven: Driven) -> None:
    api = driven.client
    enable(api, evolution=True)
    # A Claude Code turn the runtime ends with an error teaches a lesson of that pattern.
    claude(driven, "UserPromptSubmit-1.json", "first", prompt="Tag the release", prompt_id="p1")
    claude(driven, "StopFailure-1.json", "first", prompt_id="p1", error="rate_limit")
    assert reflect(driven) == {"completed": 1}
    (lesson,) = api.get("/api/autonomy/revisions?agentId=claude-code").json()["items"]
    assert lesson["key"].startswith("lesson.rate-limit-")
    target = api.get(
        f"/api/autonomy/targets/overlay/claude-code/{lesson['key']}", params=DEFAULT
    ).json()

    # The next turn is told the lesson, then the operator reverts it while the turn runs.
    told = claude(driven, "UserPromptSubmit-1.json", "second", prompt="Tag again", prompt_id="p2")
    assert "Tag the release" in told["hookSpecificOutput"]["additionalContext"]
    assert api.post(f"/api/autonomy/revisions/{lesson['id']}/revert").status_code == 200
    claude(driven, "StopFailure-1.json", "second", prompt_id="p2", error="rate_limit")
    assert reflect(driven) == {"completed": 1}
    (told_signal,) = [
        s for s in api.get("/api/autonomy/signals").json()["items"] if s["turnId"] == "p2"
    ]
    assert told_signal["received"] == [target["id"]]
    # Its failure happened with the lesson in hand: no evidence the lesson was missing.
    assert told_signal["strategy"] == "none"
    assert (
        api.get(
            f"/api/autonomy/targets/overlay/claude-code/{lesson['key']}", params=DEFAULT
        ).json()["content"]
        is None
    )

    # A turn that never had it (the lesson was reverted before it began) teaches it again.
    untold = claude(
        driven, "UserPromptSubmit-1.json", "third", prompt="Tag once more", prompt_id="p3"
    )
    assert "Tag the release" not in json.dumps(untold)
    claude(driven, "StopFailure-1.json", "third", prompt_id="p3", error="rate_limit")
    assert reflect(driven) == {"completed": 1}
    relearned = api.get(
        f"/api/autonomy/targets/overlay/claude-code/{lesson['key']}", params=DEFAULT
    ).json()
    assert relearned["content"] is not None and "Tag once more" in relearned["content"]
