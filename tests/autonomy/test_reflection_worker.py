"""The reflection worker on both stores: policy gates, all-or-nothing mutations, learned
revisions with digests (SPEC §8.2, §8.3)."""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient

from domain.learned_target import content_digest
from domain.reflection import Decision, SignalEvidence, lesson_key
from tests.autonomy.conftest import Driven, enable, post_signal

REVISION_FIELDS = {
    "id", "targetKind", "agentId", "key", "signalId", "content", "previousContentDigest",
    "contentDigest", "revertsRevisionId", "revertedByRevisionId", "actor", "at", "workspaceId",
}  # fmt: skip
# What the default workspace's evidence teaches is that workspace's target.
DEFAULT = {"workspaceId": "default"}


class Fixed:
    """A reflector that always proposes the same decision and remembers what it saw."""

    def __init__(self, decision: Decision) -> None:
        self.decision = decision
        self.seen: list[tuple[SignalEvidence, list[dict[str, Any]]]] = []

    def reflect(self, signal: SignalEvidence, targets: list[dict[str, Any]]) -> Decision:
        self.seen.append((signal, targets))
        return self.decision


class Echo:
    """A reflector that teaches each failure, as given, into the one overlay `instructions`."""

    def reflect(self, signal: SignalEvidence, targets: list[dict[str, Any]]) -> Decision:
        return Decision("overlay", "instructions", signal.failure)


def row(client: TestClient, signal_id: str) -> dict[str, Any]:
    response = client.get(f"/api/autonomy/signals/{signal_id}")
    assert response.status_code == 200, response.text
    data: dict[str, Any] = response.json()
    return data


def run(driven: Driven) -> dict[str, int]:
    outcomes = driven.autonomy.reflect()
    driven.settled()
    return outcomes


def nothing_learned(client: TestClient) -> bool:
    revisions: list[Any] = client.get("/api/autonomy/revisions").json()["items"]
    targets: list[Any] = client.get("/api/autonomy/targets").json()["items"]
    return revisions == [] and targets == []


def test_with_evolution_off_claimed_signals_are_ignored_without_asking(driven: Driven) -> None:
    reflector = Fixed(Decision("overlay", "instructions", "Be careful."))
    driven.autonomy.reflector = reflector
    signal = post_signal(driven.client, failure="boom")
    assert run(driven) == {"ignored": 1}
    ignored = row(driven.client, signal["id"])
    assert (ignored["status"], ignored["reason"], ignored["attempts"]) == (
        "ignored",
        "evolution is disabled",
        1,
    )
    assert reflector.seen == [] and nothing_learned(driven.client)
    assert run(driven) == {}  # ignored for good


def test_each_strategy_needs_its_own_policy(driven: Driven) -> None:
    api = driven.client
    enable(api, evolution=True)
    for n, (decision, policy) in enumerate(
        [
            (Decision("skill", "db-reset", "Drop and migrate."), "skillCreation"),
            (Decision("fact", "uses-pnpm", "yes"), "factRetention"),
        ]
    ):
        driven.autonomy.reflector = Fixed(decision)
        blocked = post_signal(api, traceId=f"blocked-{n}", kind="outcome", outcome="ok")
        assert run(driven) == {"ignored": 1}
        assert row(api, blocked["id"])["reason"] == f"{decision.strategy} is disabled by policy"
        assert len(api.get("/api/autonomy/revisions").json()["items"]) == n  # no mutation
        enable(api, **{policy: True})
        allowed = post_signal(api, traceId=f"allowed-{n}", kind="outcome", outcome="ok")
        assert run(driven) == {"completed": 1}
        done = row(api, allowed["id"])
        assert (done["strategy"], done["revisionId"] is not None) == (decision.strategy, True)
        target = api.get(
            f"/api/autonomy/targets/{decision.strategy}/claude/{decision.key}", params=DEFAULT
        )
        assert target.json()["content"] == decision.content
        enable(api, **{policy: False})
    assert len(api.get("/api/autonomy/revisions").json()["items"]) == 2


def test_overlay_revisions_append_and_chain_their_digests(driven: Driven) -> None:
    api = driven.client
    enable(api, evolution=True)
    driven.autonomy.reflector = Echo()
    first = post_signal(api, traceId="a", failure="flaky network in CI", failureClass="timeout")
    assert run(driven) == {"completed": 1}
    second = post_signal(api, traceId="b", failure="forgot migrations", failureClass="validation")
    assert run(driven) == {"completed": 1}
    revisions = api.get("/api/autonomy/revisions?targetKind=overlay&agentId=claude").json()
    newest, oldest = revisions["items"]
    assert set(newest) == REVISION_FIELDS
    assert (oldest["signalId"], newest["signalId"]) == (first["id"], second["id"])
    assert oldest["previousContentDigest"] is None
    assert newest["previousContentDigest"] == oldest["contentDigest"]
    assert newest["contentDigest"] == content_digest(newest["content"])
    assert newest["content"].startswith(oldest["content"] + "\n")
    assert "forgot migrations" in newest["content"] and newest["actor"] == "system"
    target = api.get("/api/autonomy/targets/overlay/claude/instructions", params=DEFAULT).json()
    assert (target["content"], target["evolutionManaged"]) == (newest["content"], True)
    assert [h["change"] for h in target["history"]] == ["revision", "revision"]
    done = row(api, second["id"])
    assert (done["targetId"], done["revisionId"]) == (target["id"], newest["id"])
    assert api.get("/api/autonomy/revisions?agentId=codex").json()["items"] == []


def test_the_reflector_sees_the_agents_evolution_managed_targets(driven: Driven) -> None:
    api = driven.client
    enable(api, evolution=True)
    post_signal(api, traceId="a", failure="boom")
    run(driven)
    assert (
        api.put("/api/autonomy/targets/skill/claude/mine", json={"content": "x"}).status_code == 200
    )
    reflector = Fixed(Decision("none"))
    driven.autonomy.reflector = reflector
    post_signal(api, traceId="b", failure="again")
    assert run(driven) == {"completed": 1}
    (signal, targets), *_ = reflector.seen
    assert (signal.agent_id, signal.trace_id, signal.failure) == ("claude", "b", "again")
    assert [(t["kind"], t["key"]) for t in targets] == [("overlay", lesson_key(None, "boom"))]


def test_a_none_decision_completes_without_mutation(driven: Driven) -> None:
    enable(driven.client, evolution=True)
    signal = post_signal(driven.client, failure=None, failureClass=None)
    assert run(driven) == {"completed": 1}  # the rules reflector: nothing to learn
    assert row(driven.client, signal["id"])["strategy"] == "none"
    assert nothing_learned(driven.client)


def test_a_proposal_carrying_a_secret_fails_without_any_mutation(driven: Driven) -> None:
    enable(driven.client, evolution=True, skillCreation=True)
    secret = "use token sk-live-0123456789abcdefghijklmnop to deploy"
    driven.autonomy.reflector = Fixed(Decision("skill", "deploy", secret))
    signal = post_signal(driven.client, kind="outcome", outcome="deployed")
    assert run(driven) == {"pending": 1}
    failed = row(driven.client, signal["id"])
    assert (failed["attempts"], failed["nextAttemptAt"] is not None) == (1, True)
    assert "secret" in failed["lastError"] and "sk-live" not in failed["lastError"]
    assert nothing_learned(driven.client)


def test_a_proposal_touching_a_user_owned_target_fails_without_partial_mutation(
    driven: Driven,
) -> None:
    api = driven.client
    enable(api, evolution=True)
    # The target the rules reflector would teach this failure into.
    path = f"/api/autonomy/targets/overlay/claude/{lesson_key(None, 'boom')}"
    mine = api.put(path, json={"content": "Mine."}, params=DEFAULT)
    assert mine.status_code == 200 and mine.json()["evolutionManaged"] is False
    signal = post_signal(api, failure="boom")
    assert run(driven) == {"pending": 1}
    failed = row(api, signal["id"])
    assert "user-owned" in failed["lastError"] and failed["revisionId"] is None
    target = api.get(path, params=DEFAULT).json()
    assert (target["content"], target["revisionCount"]) == ("Mine.", 0)
    assert api.get("/api/autonomy/revisions").json()["items"] == []
