"""An eventId is the client's idempotency key within its session (SPEC §6.3), on both
stores: the same eventId in two sessions is two events, each with its own decision; a
retry within one session is answered from its stored dispatch and records nothing. A
dispatch recorded under the global id of earlier releases still answers its own
session's retry, and no other session's."""

from __future__ import annotations

from typing import Any
from uuid import UUID

import pytest
from fastapi.testclient import TestClient

from bootstrap import Services
from domain.hook_dispatch_record import HookDispatch
from domain.ids import stable_id
from tests.hook_server import HookServer
from tests.test_hook_dispatch_record import FIELDS
from tests.test_hook_gateway_api import gateway_client, hook_server, new_session, post

__all__ = ["gateway_client", "hook_server"]  # fixtures, used by name

POLICY = {"PreToolUse": [{"id": "policy", "type": "http", "url": "$URL/policy"}]}


# How earlier releases derived a dispatch's id: from the eventId alone, for every session.
LEGACY_ID = stable_id("hook-dispatch", "old-1")


def head(client: TestClient) -> int:
    services: Services = client.app.state.services  # type: ignore[attr-defined]
    return int(services.app.recorder.max_notification_id() or 0)


def per_session(body: dict[str, Any]) -> tuple[int, Any]:
    """A handler whose answer depends on the session it is asked about."""
    return 200, {"schemaVersion": 1, "outcome": "deny", "reason": f"not in {body['sessionId']}"}


def ended(session_id: str) -> dict[str, Any]:
    """The PostToolUse of the session's call: no handler matches it."""
    return {
        "event": "PostToolUse",
        "eventId": "e-2",
        "turnId": "t",
        "toolName": "Bash",
        "toolCallId": f"call-{session_id}",
    }


@pytest.fixture
def policed(gateway_client: TestClient, hook_server: HookServer) -> TestClient:
    """A server whose PreToolUse handler answers each session differently."""
    hook_server.routes["/policy"] = per_session
    return gateway_client


@pytest.mark.parametrize("gateway_client", [POLICY], indirect=True)
def test_the_same_event_id_in_two_sessions_is_two_events_each_with_its_own_decision(
    policed: TestClient, hook_server: HookServer
) -> None:
    client = policed
    first, second = new_session(client), new_session(client)
    call = {"event": "PreToolUse", "eventId": "e-1", "toolName": "Bash", "turnId": "t"}
    answers = {}
    for session_id in (first, second):
        before = head(client)
        answered = post(client, session_id, **call, toolCallId=f"call-{session_id}")
        assert answered.status_code == 200, answered.text
        assert answered.json()["reason"] == f"not in {session_id}"
        assert head(client) > before  # recorded, not taken for the other session's retry
        answers[session_id] = answered
    assert answers[first].json()["dispatchId"] != answers[second].json()["dispatchId"]
    assert len(hook_server.bodies("/policy")) == 2
    # An event no handler matches (the fast path) is recorded in each session too.
    observed = {}
    for session_id in (first, second):
        before = head(client)
        observed[session_id] = post(client, session_id, **ended(session_id))
        assert observed[session_id].status_code == 200 and head(client) > before
    assert observed[first].json()["dispatchId"] != observed[second].json()["dispatchId"]
    # A retry within a session still gets that session's stored decision, recording nothing.
    for session_id in (first, second):
        before = head(client)
        again = post(client, session_id, **call, toolCallId=f"call-{session_id}")
        assert again.json() == answers[session_id].json()
        retried = post(client, session_id, **ended(session_id))
        assert retried.json() == observed[session_id].json()
        assert head(client) == before
    assert len(hook_server.bodies("/policy")) == 2  # no handler asked again
    # Each session's audit and timeline show its own events, with its own decision.
    position = str(head(client))
    for session_id in (first, second):
        hooks = client.get(
            f"/api/sessions/{session_id}/hooks", params={"minPosition": position}
        ).json()["items"]
        dispatches = {h["dispatchId"] for h in hooks if h["event"] != "SessionStart"}
        assert dispatches == {
            answers[session_id].json()["dispatchId"],
            observed[session_id].json()["dispatchId"],
        }
        timeline = client.get(
            f"/api/sessions/{session_id}/timeline", params={"minPosition": position}
        ).json()
        calls = [c for turn in timeline["items"] for c in turn["calls"]]
        assert [(c["toolCallId"], c["reason"]) for c in calls] == [
            (f"call-{session_id}", f"not in {session_id}")
        ]


@pytest.mark.parametrize("gateway_client", [POLICY], indirect=True)
def test_a_dispatch_under_the_earlier_global_id_answers_only_its_own_sessions_retry(
    policed: TestClient, hook_server: HookServer
) -> None:
    client = policed
    services: Services = client.app.state.services  # type: ignore[attr-defined]
    owner, other = new_session(client), new_session(client)
    # As an earlier release recorded it.
    stored = {
        **FIELDS,
        "dispatch_id": LEGACY_ID,
        "session_id": UUID(owner),
        "event_name": "PreToolUse",
        "event_id": "old-1",
        "reason": "decided before the upgrade",
        "additional_context": None,
        "replacement": None,
        "facts": None,
        "learned": None,
    }
    services.app.save(HookDispatch(**stored))
    call = {"event": "PreToolUse", "eventId": "old-1", "toolName": "Bash"}
    before = head(client)
    retried = post(client, owner, **call)
    assert retried.json() == {
        "outcome": "deny",
        "reason": "decided before the upgrade",
        "dispatchId": str(LEGACY_ID),
    }
    assert head(client) == before and hook_server.bodies("/policy") == []
    elsewhere = post(client, other, **call)
    assert elsewhere.json()["reason"] == f"not in {other}"
    assert elsewhere.json()["dispatchId"] != str(LEGACY_ID)
    assert head(client) > before and len(hook_server.bodies("/policy")) == 1
