"""What a hook call is turned into: the request a managed handler receives, and the
HookDispatch event that records the decision (pure functions of the call)."""

from __future__ import annotations

from datetime import datetime
from typing import Any
from uuid import UUID

from eventsourcing.domain import DomainEventProtocol

from domain.dispatch_facts import dispatch_facts
from domain.dispatch_text import recorded_decision, summary_hint, title_hint
from domain.hook_dispatch import Decision, HandlerRequest, redact_tool_input
from domain.hook_dispatch_record import creation_event
from domain.lifecycle import REPORTED_FIELDS, LifecycleEvent


def handler_request(
    session_id: UUID,
    ev: LifecycleEvent,
    dispatch_id: UUID,
    received: datetime,
    redacted_tools: frozenset[str],
) -> HandlerRequest:
    """The request every managed handler of this call receives (SPEC §6.4)."""
    return HandlerRequest(
        event_id=ev.event_id or str(dispatch_id),
        event=ev.event,
        session_id=str(session_id),
        turn_id=ev.turn_id,
        tool_call_id=ev.tool_call_id,
        tool_name=ev.tool_name,
        agent=ev.agent,
        model=ev.model,
        timestamp=received.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
        tool_input=redact_tool_input(ev.tool_name, ev.tool_input, redacted_tools),
        tool_response=redact_tool_input(ev.tool_name, ev.tool_response, redacted_tools),
        prompt=ev.prompt,
        last_assistant_message=ev.last_assistant_message,
        subagent_id=ev.subagent_id,
        detail=ev.detail,
        **{name: getattr(ev, name) for name in REPORTED_FIELDS},
    )


def dispatch_created(
    session_id: UUID,
    ev: LifecycleEvent,
    dispatch_id: UUID,
    decision: Decision,
    note: str | None,
    actor: str,
    received: datetime,
    learned: list[dict[str, Any]] | None,
    facts_of: frozenset[str] | None,
) -> DomainEventProtocol[UUID]:
    """The HookDispatch that records this decision (its context is the handlers'; the
    learned content it carried is recorded by reference, `learned`). `facts_of`: the
    tools whose input is redacted, when the call's facts are recorded; None when only
    its names are (TACHOGRAPH_RECORD=metadata)."""
    return creation_event(
        dispatch_id=dispatch_id,
        session_id=session_id,
        event_name=ev.event,
        event_id=ev.event_id,
        turn_id=ev.turn_id,
        agent=ev.agent,
        agent_session_id=ev.agent_session_id,
        tool_name=ev.tool_name,
        tool_call_id=ev.tool_call_id,
        subagent_id=ev.subagent_id,
        outcome=decision.outcome,
        # The recorded copy of every text is redacted; the answer is not (see
        # domain/dispatch_text.py).
        **recorded_decision(decision),
        title_hint=title_hint(ev.prompt) if ev.event == "UserPromptSubmit" else None,
        summary_hint=summary_hint(ev.last_assistant_message) if ev.event == "Stop" else None,
        note=note,
        actor=actor,
        facts=dispatch_facts(ev, decision, facts_of) if facts_of is not None else None,
        received_at=received,
        learned=learned,
        policy=decision.policy.record() if decision.policy is not None else None,
    )
