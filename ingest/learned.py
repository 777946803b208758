"""What an agent learned, delivered with the answers that open a session or a turn.

The learned text shares the one context cap with the managed handlers' context (it gets
what they left), and the answer records which learned items it carried.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Any
from uuid import UUID

from domain.agent_ids import agent_id_for
from domain.hook_dispatch import CONTEXT_CAP, CONTEXT_SEPARATOR, Decision
from domain.learned_delivery import combine
from domain.lifecycle import LifecycleEvent
from ingest.ports import LearnedSource
from ingest.runtimes import cline

log = logging.getLogger(__name__)

# Where an agent is told what it learned: every runtime's renderer carries context on
# these (SPEC §8), and they open a session or a turn, so each turn receives it once
# (Cline, which reads neither answer, with its first tool results: cline.takes_learned).
LEARNED_EVENTS = frozenset({"SessionStart", "UserPromptSubmit"})
# A denied prompt starts no turn: nothing is delivered with the refusal.
_LEARNED_OUTCOMES = frozenset({"pass", "modify"})


def with_learned(
    learned: LearnedSource | None, session_id: UUID, ev: LifecycleEvent, decision: Decision
) -> tuple[Decision, list[dict[str, Any]] | None]:
    """The decision as the agent gets it: the managed handlers' context and the
    agent's learned content within the one context cap (the learned text gets what
    the handlers left); and the learned items it carries, None when none."""
    if (
        learned is None
        or not (cline.takes_learned(ev) if ev.agent == cline.AGENT else ev.event in LEARNED_EVENTS)
        or decision.outcome not in _LEARNED_OUTCOMES
    ):
        return decision, None
    context = decision.additional_context
    used = len(context.encode("utf-8")) + len(CONTEXT_SEPARATOR) if context else 0
    try:
        composed = learned(agent_id_for(ev.agent), CONTEXT_CAP - used, session_id)
    except Exception:  # noqa: BLE001 - a delivery never fails or blocks a hook
        log.exception("learned content could not be composed")
        return decision, None
    if composed.text is None:
        return decision, None
    delivered = replace(
        decision, additional_context=combine(context, composed.text, CONTEXT_SEPARATOR)
    )
    return delivered, list(composed.items)
