"""Signals on both stores: dedupe, redacted bounded evidence, claims that expire, capped
backoff and dead-letter on an injected clock, operator ignore/retry (SPEC §8.1)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any
from uuid import UUID

from fastapi.testclient import TestClient

from domain.reflection import Decision, ReflectionFailed, SignalEvidence
from domain.signal import MAX_ATTEMPTS
from tests.autonomy.conftest import Driven, enable, post_signal

SIGNAL_FIELDS = {
    "id", "agentId", "traceId", "kind", "goal", "outcome", "failure", "failureClass",
    "sessionId", "turnId", "received", "status", "attempts", "nextAttemptAt", "claimedBy",
    "claimExpiresAt", "lastError", "strategy", "targetId", "revisionId", "reason", "createdAt",
    "updatedAt", "workspaceId", "credential", "actor", "sessionTitle",
}  # fmt: skip


class Broken:
    """A reflector that always fails (a transport error, say)."""

    def __init__(self) -> None:
        self.calls = 0

    def reflect(self, signal: SignalEvidence, targets: list[dict[str, Any]]) -> Decision:
        self.calls += 1
        raise ReflectionFailed("request failed (transport)")


def signal_row(client: TestClient, signal_id: str) -> dict[str, Any]:
    response = client.get(f"/api/autonomy/signals/{signal_id}")
    assert response.status_code == 200, response.text
    data: dict[str, Any] = response.json()
    return data


def test_a_repeated_dedupe_key_returns_the_existing_signal(api: TestClient) -> None:
    first = post_signal(api, goal="fix the build", failure="make: *** error 2")
    assert set(first) == SIGNAL_FIELDS
    assert (first["status"], first["attempts"], first["kind"]) == ("pending", 0, "failure")
    again = post_signal(api, expected=200, goal="something else entirely")
    assert again["id"] == first["id"] and again["goal"] == "fix the build"
    other_kind = post_signal(api, kind="outcome", outcome="done")
    other_trace = post_signal(api, traceId="t2")
    other_agent = post_signal(api, agentId="codex")
    ids = {first["id"], other_kind["id"], other_trace["id"], other_agent["id"]}
    assert len(ids) == 4
    listed = api.get("/api/autonomy/signals").json()["items"]
    assert [s["id"] for s in listed] == [other_agent["id"], other_trace["id"], other_kind["id"],
                                         first["id"]]  # fmt: skip
    assert len(api.get("/api/autonomy/signals?agentId=codex").json()["items"]) == 1


def test_a_signal_names_its_session_by_title(api: TestClient) -> None:
    created = api.post("/api/sessions", json={"workspaceId": "default", "title": "Fix login"})
    assert created.status_code == 201, created.text
    session_id = created.json()["id"]
    posted = post_signal(api, sessionId=session_id, traceId="titled")
    assert posted["sessionTitle"] == "Fix login"
    listed = api.get("/api/autonomy/signals").json()["items"]
    assert [s["sessionTitle"] for s in listed if s["id"] == posted["id"]] == ["Fix login"]
    untitled = post_signal(api, traceId="no-session")
    assert untitled["sessionId"] is None and untitled["sessionTitle"] is None


def test_evidence_is_redacted_and_bounded_before_it_is_stored(
    api: TestClient, driven: Driven
) -> None:
    token = "sk-ant-api03-" + "Ab1" * 12
    key = "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA\n-----END RSA PRIVATE KEY-----"
    created = post_signal(
        api,
        goal="deploy with Authorization: Bearer eyJhbGciOi.payload.sig-123",
        failure=f"curl failed; key={token}; pem: {key}; " + "x" * 5000,
        outcome="ok " * 2000,
    )
    stored = [created["goal"], created["failure"], created["outcome"]]
    assert created["goal"] == "deploy with Authorization: Bearer [redacted]"
    assert token not in created["failure"] and "PRIVATE KEY" not in created["failure"]
    assert "[redacted]" in created["failure"]
    assert all(len(text.encode()) <= 2048 for text in stored)
    assert created["failure"].endswith("…[truncated]")
    # The event itself never held the secret: the log is what auditors replay.
    stream = api.get(f"/api/streams/{created['id']}").json()
    assert token not in str(stream) and "Bearer eyJ" not in str(stream)


def test_bad_signals_are_refused(api: TestClient) -> None:
    base = {"agentId": "claude", "traceId": "t", "kind": "failure", "goal": "g"}
    for bad in (
        {"kind": "mood"},
        {"agentId": "no spaces"},
        {"traceId": ""},
        {"goal": ""},
        {"sessionId": "not-a-uuid"},
        {"extra": 1},
    ):
        response = api.post("/api/autonomy/signals", json={**base, **bad})
        assert response.status_code == 422, (bad, response.text)
    assert api.get("/api/autonomy/signals").json()["items"] == []


def test_an_abandoned_claim_is_recovered_after_it_expires(driven: Driven) -> None:
    signal = post_signal(driven.client, failure="boom")
    sid = UUID(signal["id"])
    signals = driven.autonomy.signals
    claim = signals.claim(sid, "worker-a")
    assert claim is not None and claim.attempt == 1
    assert signals.claim(sid, "worker-b") is None  # held, not expired
    driven.settled()
    row = signal_row(driven.client, signal["id"])
    assert (row["status"], row["claimedBy"]) == ("claimed", "worker-a")
    driven.clock.advance(signals.claim_ttl.total_seconds() - 1)
    assert driven.autonomy.reflect() == {}  # the claim has not expired yet
    driven.clock.advance(2)
    enable(driven.client, evolution=True)
    assert driven.autonomy.reflect() == {"completed": 1}  # worker-a vanished; recovered
    driven.settled()
    row = signal_row(driven.client, signal["id"])
    assert (row["status"], row["attempts"], row["strategy"]) == ("completed", 2, "overlay")
    # worker-a comes back: its stale attempt changes nothing.
    assert signals.reflect(claim, driven.autonomy.reflector, []) == "lost"


def test_failures_back_off_exponentially_then_dead_letter_after_five_attempts(
    driven: Driven,
) -> None:
    enable(driven.client, evolution=True)
    broken = Broken()
    driven.autonomy.reflector = broken
    signal = post_signal(driven.client, failure="boom")
    waits = []
    for attempt in range(1, MAX_ATTEMPTS + 1):
        assert driven.autonomy.reflect() == {
            ("dead-letter" if attempt == MAX_ATTEMPTS else "pending"): 1
        }
        driven.settled()
        row = signal_row(driven.client, signal["id"])
        assert row["attempts"] == attempt and "transport" in row["lastError"]
        if attempt == MAX_ATTEMPTS:
            assert (row["status"], row["nextAttemptAt"]) == ("dead-letter", None)
            break
        assert row["status"] == "pending"
        delay = driven.autonomy.signals.backoff.delay(attempt)
        waits.append(delay)
        driven.clock.advance(delay.total_seconds() - 1)
        assert driven.autonomy.reflect() == {}  # still backing off
        driven.clock.advance(1)
    assert waits == [timedelta(seconds=s) for s in (10, 20, 40, 80)]
    assert driven.autonomy.signals.backoff.delay(12) == timedelta(minutes=10)  # capped
    driven.clock.advance(86400)
    assert driven.autonomy.reflect() == {} and broken.calls == MAX_ATTEMPTS


def test_an_expired_last_attempt_dead_letters_instead_of_a_sixth(driven: Driven) -> None:
    enable(driven.client, evolution=True)
    driven.autonomy.reflector = Broken()
    signal = post_signal(driven.client, failure="boom")
    sid = UUID(signal["id"])
    for _ in range(MAX_ATTEMPTS - 1):
        driven.autonomy.reflect()
        driven.clock.advance(3600)
    assert driven.autonomy.signals.claim(sid, "doomed") is not None  # attempt 5, abandoned
    driven.clock.advance(driven.autonomy.signals.claim_ttl.total_seconds())
    assert driven.autonomy.reflect() == {}
    driven.settled()
    row = signal_row(driven.client, signal["id"])
    assert (row["status"], row["attempts"]) == ("dead-letter", MAX_ATTEMPTS)
    assert "claim expired" in row["lastError"]


def test_ignore_and_retry_routes_follow_the_state_rules(driven: Driven) -> None:
    api = driven.client
    enable(api, evolution=True)
    driven.autonomy.reflector = Broken()
    pending = post_signal(api, traceId="pending")
    ignored = api.post(f"/api/autonomy/signals/{pending['id']}/ignore")
    assert (ignored.status_code, ignored.json()["status"]) == (200, "ignored")
    for action in ("ignore", "retry"):
        refused = api.post(f"/api/autonomy/signals/{pending['id']}/{action}")
        assert refused.status_code == 409 and refused.json()["error"] == "invalid_state"
        assert refused.json()["currentState"] == "ignored"
    # Retry needs a dead letter.
    failing = post_signal(api, traceId="failing")
    refused = api.post(f"/api/autonomy/signals/{failing['id']}/retry")
    assert (refused.status_code, refused.json()["currentState"]) == (409, "pending")
    for _ in range(MAX_ATTEMPTS):
        driven.autonomy.reflect()
        driven.clock.advance(3600)
    driven.settled()
    assert signal_row(api, failing["id"])["status"] == "dead-letter"
    retried = api.post(f"/api/autonomy/signals/{failing['id']}/retry")
    assert retried.status_code == 200, retried.text
    assert (retried.json()["status"], retried.json()["attempts"]) == ("pending", 0)
    assert retried.json()["lastError"] is None
    # It starts over: five fresh attempts before it dead-letters again.
    driven.autonomy.reflect()
    driven.settled()
    assert signal_row(api, failing["id"])["attempts"] == 1
    # A dead letter can also be ignored; a claimed signal cannot.
    claimed = post_signal(api, traceId="claimed")
    assert driven.autonomy.signals.claim(UUID(claimed["id"]), "w") is not None
    refused = api.post(f"/api/autonomy/signals/{claimed['id']}/ignore")
    assert (refused.status_code, refused.json()["currentState"]) == (409, "claimed")
    missing = api.post("/api/autonomy/signals/00000000-0000-0000-0000-000000000000/ignore")
    assert (missing.status_code, missing.json()["error"]) == (404, "not_found")
    assert api.get("/api/autonomy/signals?status=ignored").json()["items"][0]["id"] == pending["id"]
