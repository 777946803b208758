"""The hot path's HookDispatch creation event equals the one the aggregate's constructor records."""

from __future__ import annotations

from dataclasses import fields
from datetime import UTC, datetime
from typing import Any
from uuid import uuid4

from eventsourcing.domain import Aggregate

from bootstrap import Services
from domain.hook_dispatch_record import HookDispatch, creation_event

FIELDS: dict[str, Any] = {
    "dispatch_id": uuid4(),
    "session_id": uuid4(),
    "event_name": "PostToolUse",
    "event_id": "evt-1",
    "turn_id": "turn-1",
    "agent": "claude-code",
    "agent_session_id": "agent-session",
    "tool_name": "Bash",
    "tool_call_id": "call-1",
    "subagent_id": None,
    "outcome": "deny",
    "reason": "no",
    "additional_context": "context",
    "replacement": {"command": "ls"},
    "runs": [{"handler_id": "h", "outcome": "deny", "failure": None}],
    "title_hint": None,
    "summary_hint": "summary",
    "note": None,
    "actor": "test",
    "facts": {"input_summary": "ls", "input": {"command": "ls"}},
    "received_at": datetime(2026, 12, 1, 12, 0, tzinfo=UTC),
    "learned": [
        {
            "target_id": "t",
            "kind": "overlay",
            "agent_id": "claude-code",
            "key": "lesson.tests",
            "revision_id": None,
            "content_digest": "sha256:" + "0" * 64,
        }
    ],
    "policy": {"revision_id": "r", "rule_id": "no-rm", "mode": "shadow", "outcome": "deny"},
}


def test_the_event_is_the_constructors_but_for_its_timestamp() -> None:
    (built,) = HookDispatch(**FIELDS).collect_events()
    direct = creation_event(**FIELDS)
    assert type(direct) is type(built)
    names = [f.name for f in fields(built)]  # type: ignore[arg-type]
    assert "timestamp" in names and len(names) == len(FIELDS) + 4
    for name in names:
        if name != "timestamp":
            assert getattr(direct, name) == getattr(built, name), name
    assert direct.timestamp.tzinfo is not None and direct.timestamp >= built.timestamp


def test_a_stored_event_reads_back_as_the_aggregate_the_constructor_builds(
    services: Services,
) -> None:
    services.start()
    assert services.committer is not None
    dispatch_id = uuid4()
    appended = services.committer.submit_events(
        dispatch_id, [creation_event(**{**FIELDS, "dispatch_id": dispatch_id})]
    )
    assert appended.result(timeout=10) > 0
    stored: Aggregate = services.app.repository.get(dispatch_id)
    expected = HookDispatch(**{**FIELDS, "dispatch_id": dispatch_id})
    assert isinstance(stored, HookDispatch)
    assert stored.id == dispatch_id and stored.version == 1
    assert stored.state_dict() == expected.state_dict()
