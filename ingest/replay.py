"""The answer a retried event gets: its stored decision, never a second run of its handlers.

A runtime that retries a hook (same eventId) must get what it was answered the first
time, and an operator must not be asked twice. The stored HookDispatch says what was
decided; the learned content it carried is delivered again only when it is still what
the agent would get now, since what an answer carries must be what the record says.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from uuid import UUID

from domain.approval import APPROVAL_HANDLER
from domain.dispatch_text import replayed
from domain.hook_dispatch import OUTCOMES, Decision, Outcome
from domain.hook_dispatch_record import HookDispatch, legacy_dispatch_id
from domain.lifecycle import LifecycleEvent
from ingest.ports import DispatchLog, Render

APPROVAL_RUN_PREFIX = APPROVAL_HANDLER + ":"
# The decision as delivered now and the learned items it carries (None when none).
Learned = list[dict[str, Any]] | None
WithLearned = Callable[[UUID, LifecycleEvent, Decision], tuple[Decision, Learned]]


def stored_answer(
    dispatches: DispatchLog,
    session_id: UUID,
    dispatch_id: UUID,
    ev: LifecycleEvent,
    render: Render | None,
    with_learned: WithLearned,
    *,
    legacy: bool = False,
) -> tuple[UUID, Decision, Any, int | None] | None:
    """A retried event's dispatch id, decision, rendered answer and the log's head, from
    its stored dispatch; None when there is none.

    `legacy`: also look under the id earlier releases gave the eventId (one for every
    session), and take what is there only when that dispatch is of this very session:
    a retry that crosses an upgrade still gets its stored decision, while another
    session's event with the same eventId is never answered from it. Only the paths
    that read the log before deciding look (handlers to run, a call an operator may
    hold); the hot path does not spend a read on it, so a retry across an upgrade of
    an event no handler matches is recorded once more (docs/hooks.md).
    """
    stored = dispatches.stored(dispatch_id)
    if stored is None and legacy and ev.event_id:
        dispatch_id = legacy_dispatch_id(ev.event_id)
        stored = dispatches.stored(dispatch_id)
    if stored is None or stored.session_id != session_id:
        return None
    outcome, refused = replayed(stored.outcome, stored.replacement)
    decision = Decision(
        stored_outcome(outcome),
        refused or stored.reason,
        stored.additional_context,
        None if refused else stored.replacement,
        approved=any(
            str(run.get("handler_id", "")).startswith(APPROVAL_RUN_PREFIX)
            and run.get("outcome") == "pass"
            for run in stored.runs
        ),
    )
    decision = _redelivered(ev, decision, stored, with_learned)
    answer = render(ev.event, decision)[0] if render is not None else None
    return dispatch_id, decision, answer, dispatches.head()


def _redelivered(
    ev: LifecycleEvent, decision: Decision, stored: HookDispatch, with_learned: WithLearned
) -> Decision:
    """With the learned content first given, when that is still what the agent would get
    now (same targets, same digests); else without it."""
    recorded = getattr(stored, "learned", None)
    if not recorded:
        return decision
    delivered, carried = with_learned(stored.session_id, ev, decision)
    return delivered if carried == recorded else decision


def stored_outcome(outcome: str) -> Outcome:
    """A recorded outcome; anything else (never written) reads as the safe side, deny."""
    # `ask` is never recorded (an approval settles it first); read as deny all the same.
    return outcome if outcome in OUTCOMES and outcome != "ask" else "deny"  # type: ignore[return-value]
