"""HookDispatch: the durable record of one lifecycle event and the decision it got."""

from __future__ import annotations

from datetime import datetime
from typing import Any
from uuid import UUID

from eventsourcing.domain import DomainEventProtocol, event
from eventsourcing.utils import get_topic

from domain.base import TachographAggregate, declare_event_versions
from domain.ids import stable_id, time_ordered_id


def dispatch_id_for(session_id: UUID, event_id: str | None) -> UUID:
    """Deterministic from the session and the client's eventId; without one, new and in
    time order (domain/ids.py, `time_ordered_id`).

    An eventId is the client's key within its session: a retry there finds its dispatch,
    the same eventId in another session is another event. The kind differs from the
    legacy one's, so no (session, eventId) pair can name a dispatch recorded under it.
    """
    if event_id:
        return stable_id("session-dispatch", str(session_id), event_id)
    return time_ordered_id()


def legacy_dispatch_id(event_id: str) -> UUID:
    """The id earlier releases derived from the eventId alone, one namespace for every
    session; their dispatches keep it (ingest/service.py finds them for a retry)."""
    return stable_id("hook-dispatch", event_id)


class HookDispatch(TachographAggregate):
    """One dispatch: what was observed, every handler run, and the combined decision.

    No raw payloads or transcripts are kept; only the decision (including any
    replacement, so a retried event gets exactly the stored answer) and the short
    hints the sessions read model derives titles and summaries from.
    """

    TOPIC = "HookDispatch"

    @staticmethod
    def create_id(dispatch_id: UUID, **_: Any) -> UUID:
        return dispatch_id

    @event("Created", topic="HookDispatch.Created")
    def __init__(
        self,
        dispatch_id: UUID,
        session_id: UUID,
        event_name: str,
        event_id: str | None,
        turn_id: str | None,
        agent: str | None,
        agent_session_id: str | None,
        tool_name: str | None,
        tool_call_id: str | None,
        subagent_id: str | None,
        outcome: str,
        reason: str | None,
        additional_context: str | None,
        replacement: Any,
        runs: list[dict[str, Any]],
        title_hint: str | None,
        summary_hint: str | None,
        note: str | None,
        actor: str,
        facts: dict[str, Any] | None = None,
        received_at: datetime | None = None,
        learned: list[dict[str, Any]] | None = None,
        policy: dict[str, Any] | None = None,
    ) -> None:
        self.session_id = session_id
        self.event_name = event_name
        self.event_id = event_id
        self.turn_id = turn_id
        self.agent = agent
        self.outcome = outcome
        self.reason = reason
        self.additional_context = additional_context
        self.replacement = replacement
        self.runs = runs
        self.note = note
        self.facts = facts
        self.received_at = received_at
        # The learned targets the answer carried (domain/learned_delivery.py's items:
        # target, revision and digest each), None when it carried none.
        self.learned = learned
        # The policy rule that decided the call, or would have in shadow mode
        # (domain/policy/judge.py's PolicyHit.record), None when no rule matched.
        self.policy = policy


# Version 2 stores `runs` with snake_case keys; version 1 (earlier releases) stored the
# wire's camelCase. Events are upcast when read, so the log's bytes never change.
_V1_RUN_KEYS = {
    "handlerId": "handler_id",
    "durationMs": "duration_ms",
    "continueCapped": "continue_capped",
}


def _upcast_created_v1_v2(state: dict[str, Any]) -> None:
    state["runs"] = [
        {_V1_RUN_KEYS.get(key, key): value for key, value in run.items()}
        for run in state.get("runs") or []
    ]


def _upcast_created_v2_v3(state: dict[str, Any]) -> None:
    # Version 3 records the call's facts (domain/dispatch_facts.py) and when the hook
    # arrived; earlier releases kept neither, which is what None says.
    state["facts"] = None
    state["received_at"] = None


def _upcast_created_v3_v4(state: dict[str, Any]) -> None:
    # Version 4 records the learned content an answer carried; earlier releases
    # delivered none.
    state["learned"] = None


def _upcast_created_v4_v5(state: dict[str, Any]) -> None:
    # Version 5 records the policy rule behind the decision; earlier releases had none.
    state["policy"] = None


HookDispatch.Created.upcast_v1_v2 = staticmethod(_upcast_created_v1_v2)  # type: ignore[attr-defined]
HookDispatch.Created.upcast_v2_v3 = staticmethod(_upcast_created_v2_v3)  # type: ignore[attr-defined]
HookDispatch.Created.upcast_v3_v4 = staticmethod(_upcast_created_v3_v4)  # type: ignore[attr-defined]
HookDispatch.Created.upcast_v4_v5 = staticmethod(_upcast_created_v4_v5)  # type: ignore[attr-defined]
declare_event_versions(HookDispatch, Created=5)

_AGGREGATE_TOPIC = get_topic(HookDispatch)


def creation_event(**fields: Any) -> DomainEventProtocol[UUID]:
    """The Created event `HookDispatch(**fields)` would record, without the aggregate.

    What `BaseAggregate._create` builds (same class, topic, id, version and timestamp
    rule), minus its generic argument handling and the aggregate object nobody reads:
    the hot ingest path only appends the event, and this is ~30 us of the event loop's
    time per ingest less. tests/test_hook_dispatch_record.py holds the two equal.
    """
    created = HookDispatch.Created
    event: DomainEventProtocol[UUID] = created(
        originator_topic=_AGGREGATE_TOPIC,
        originator_id=HookDispatch.create_id(**fields),
        originator_version=HookDispatch.INITIAL_VERSION,
        timestamp=created.create_timestamp(),
        **fields,
    )
    return event
