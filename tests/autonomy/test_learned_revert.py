"""Learned targets and reverts on both stores: compensating revisions and every 409 of
SPEC §8.3, user edits that take a target over, and handing it back to evolution."""

from __future__ import annotations

from typing import Any
from uuid import uuid4

from fastapi.testclient import TestClient

from domain.learned_target import content_digest
from domain.reflection import Decision, SignalEvidence
from tests.autonomy.conftest import Driven, enable, post_signal

TARGET = "/api/autonomy/targets/overlay/claude/instructions"
# What the default workspace's evidence taught is that workspace's target.
IN = {"workspaceId": "default"}


class OneOverlay:
    """Teaches every failure into the one overlay TARGET, so its revisions chain (the rules
    reflector gives each failure pattern a target of its own)."""

    def reflect(self, signal: SignalEvidence, targets: list[dict[str, Any]]) -> Decision:
        return Decision("overlay", "instructions", signal.failure)


def learn(driven: Driven, trace: str, failure: str) -> dict[str, Any]:
    """One learned overlay revision of TARGET through the real worker."""
    driven.autonomy.reflector = OneOverlay()
    post_signal(driven.client, traceId=trace, failure=failure)
    assert driven.autonomy.reflect() == {"completed": 1}
    driven.settled()
    newest: dict[str, Any] = driven.client.get("/api/autonomy/revisions").json()["items"][0]
    assert newest["revertsRevisionId"] is None
    return newest


def revert(client: TestClient, revision_id: str) -> Any:
    return client.post(f"/api/autonomy/revisions/{revision_id}/revert")


def refused(client: TestClient, revision_id: str, code: str) -> dict[str, Any]:
    response = revert(client, revision_id)
    assert (response.status_code, response.json()["error"]) == (409, code), response.text
    body: dict[str, Any] = response.json()
    assert body["message"]
    return body


def test_revert_appends_a_compensation_restoring_the_previous_content(driven: Driven) -> None:
    api = driven.client
    enable(api, evolution=True)
    first = learn(driven, "a", "flaky network")
    second = learn(driven, "b", "forgot migrations")
    response = revert(api, second["id"])
    assert response.status_code == 200, response.text
    compensation = response.json()
    assert compensation["revertsRevisionId"] == second["id"]
    assert compensation["content"] == first["content"]
    assert compensation["contentDigest"] == first["contentDigest"]
    assert compensation["previousContentDigest"] == second["contentDigest"]
    assert (compensation["signalId"], compensation["actor"]) == (None, "anonymous")
    target = api.get(TARGET, params=IN).json()
    assert (target["content"], target["latestRevisionId"]) == (first["content"], compensation["id"])
    assert [h["change"] for h in target["history"]] == ["revision", "revision", "revert"]
    # Append-only: the reverted revision is still listed, now linked to its compensation.
    listed = {r["id"]: r for r in api.get("/api/autonomy/revisions").json()["items"]}
    assert len(listed) == 3
    assert listed[second["id"]] == {**second, "revertedByRevisionId": compensation["id"]}
    assert listed[first["id"]] == first
    # The log holds the compensation as a new event; nothing was edited in place.
    stream = api.get(f"/api/streams/{target['id']}").json()
    assert [e["type"] for e in stream["events"]] == [
        "LearnedTarget.Created",
        "LearnedTarget.Revised",
        "LearnedTarget.Revised",
        "LearnedTarget.Revised",
    ]


def test_reverting_the_first_revision_leaves_no_content(driven: Driven) -> None:
    enable(driven.client, evolution=True)
    only = learn(driven, "a", "boom")
    compensation = revert(driven.client, only["id"]).json()
    assert (compensation["content"], compensation["contentDigest"]) == (None, None)
    assert driven.client.get(TARGET, params=IN).json()["content"] is None


def test_every_revert_refusal(driven: Driven) -> None:
    api = driven.client
    enable(api, evolution=True)
    first = learn(driven, "a", "one")
    second = learn(driven, "b", "two")
    refused(api, first["id"], "not_latest")
    compensation = revert(api, second["id"]).json()
    body = refused(api, second["id"], "already_reverted")
    assert body["revertedByRevisionId"] == compensation["id"]
    refused(api, compensation["id"], "not_revertible")
    third = learn(driven, "c", "three")
    # A person edits the target: it is theirs now, evolution keeps off.
    edited = api.put(TARGET, json={"content": "Written by hand."}, params=IN)
    assert edited.status_code == 200 and edited.json()["evolutionManaged"] is False
    refused(api, third["id"], "user_owned")
    # Handed back, the content is still the person's: the old revision no longer matches it.
    handed = api.post(TARGET + "/hand-back", params=IN)
    assert handed.status_code == 200 and handed.json()["evolutionManaged"] is True
    refused(api, third["id"], "target_changed")
    assert api.get(TARGET, params=IN).json()["content"] == "Written by hand."
    missing = revert(api, str(uuid4()))
    assert (missing.status_code, missing.json()["error"]) == (404, "not_found")
    assert revert(api, "not-a-uuid").status_code == 422
    history = [h["change"] for h in api.get(TARGET, params=IN).json()["history"]]
    assert history == ["revision", "revision", "revert", "revision", "user_edit", "hand_back"]


def test_after_a_hand_back_evolution_builds_on_the_persons_content(driven: Driven) -> None:
    api = driven.client
    enable(api, evolution=True)
    assert api.put(TARGET, json={"content": "Be terse."}, params=IN).status_code == 200
    driven.autonomy.reflector = OneOverlay()
    blocked = post_signal(api, traceId="x", failure="boom")
    assert driven.autonomy.reflect() == {"pending": 1}  # user-owned: the attempt fails
    assert api.post(f"/api/autonomy/signals/{blocked['id']}/ignore").status_code == 200
    api.post(TARGET + "/hand-back", params=IN)
    learned = learn(driven, "y", "crash")
    assert learned["previousContentDigest"] == content_digest("Be terse.")
    assert learned["content"].startswith("Be terse.\n")
    restored = revert(api, learned["id"]).json()
    assert restored["content"] == "Be terse."


def test_user_edits_create_user_owned_targets_and_are_validated(api: TestClient) -> None:
    created = api.put("/api/autonomy/targets/skill/codex/deploy", json={"content": "steps"})
    assert created.status_code == 200, created.text
    body = created.json()
    assert (body["evolutionManaged"], body["content"], body["revisionCount"]) == (False, "steps", 0)
    assert body["contentDigest"] == content_digest("steps")
    assert [h["change"] for h in body["history"]] == ["user_edit"]
    assert body["history"][0]["actor"] == "anonymous"
    for path, payload in (
        ("/api/autonomy/targets/memory/codex/k", {"content": "x"}),
        ("/api/autonomy/targets/skill/codex/Bad_Key", {"content": "x"}),
        ("/api/autonomy/targets/skill/bad agent/k", {"content": "x"}),
        ("/api/autonomy/targets/skill/codex/k", {"content": "x" * (16 * 1024 + 1)}),
        ("/api/autonomy/targets/skill/codex/k", {"content": "x", "owner": "me"}),
    ):
        assert api.put(path, json=payload).status_code == 422, path
    assert api.get("/api/autonomy/targets/skill/codex/k").status_code == 404
    assert api.post("/api/autonomy/targets/skill/codex/k/hand-back").status_code == 404
    listed = api.get("/api/autonomy/targets?kind=skill&agentId=codex").json()["items"]
    assert [t["key"] for t in listed] == ["deploy"]
    assert api.get("/api/autonomy/targets?kind=fact").json()["items"] == []
