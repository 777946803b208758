"""Holding a tool call for an operator: when a rule or a handler asks, and how it settles.

The gate runs on the blocking path, after the handlers decided. It never waits itself:
a call to hold comes back as a `PendingApproval`, which HookIngest waits on without a
thread (ingest/held_approvals.py) and then settles here (`settled`, `abandoned`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Final
from uuid import UUID

from domain.approval import (
    ABANDONED,
    PENDING,
    Approval,
    abandoned_decision,
    allowed_for_session,
    approval_id,
    settled_decision,
)
from domain.approval import still_pending as still_pending_decision
from domain.approval_rules import APPROVAL_EVENTS, DEFAULT_TIMEOUT_S, ApprovalRules
from domain.dispatch_facts import input_summary, redacted_input
from domain.hook_dispatch import REDACTED, Decision
from domain.lifecycle import LifecycleEvent
from domain.redaction import redact_optional
from ingest.ports import ApprovalLog, Render

# A request settled this recently still answers the same call: Claude Code's permission
# dialog right after its PreToolUse, or a runtime retrying after "still pending".
REUSE_WITHIN_S: Final = 120.0
# A held request's timer may fire a moment before its deadline: that still expires it.
_EARLY_WAKE: Final = timedelta(milliseconds=100)


@dataclass(frozen=True)
class PendingApproval:
    """A held call: its approval, and what is needed to record and answer it later."""

    approval: Approval
    session_id: UUID
    ev: LifecycleEvent
    dispatch_id: UUID
    asked: Decision
    actor: str
    render: Render | None
    received: datetime
    # How long this request may wait: the deadline, or less when the runtime cannot.
    wait_s: float

    @property
    def approval_id(self) -> UUID:
        return self.approval.id


class ApprovalGate:
    """Decides whether a decided call is held, passed by an earlier approval, or as is."""

    def __init__(
        self,
        rules: ApprovalRules,
        log: ApprovalLog | None,
        on_requested: Callable[[Approval], None] | None = None,
    ) -> None:
        self.rules = rules
        self.log = log
        # Told of each new request (the notification webhook); must not raise or block.
        self._on_requested = on_requested

    def may_hold(self, ev: LifecycleEvent) -> bool:
        """Whether this event could be held at all (the fast path must not take it)."""
        return self.log is not None and self.rules.may_hold(ev.event, ev.tool_name)

    def gate(
        self,
        session_id: UUID,
        ev: LifecycleEvent,
        dispatch_id: UUID,
        decision: Decision,
        *,
        actor: str,
        render: Render | None,
        received: datetime,
        budget_s: float | None,
        redacted_tools: frozenset[str],
    ) -> Decision | PendingApproval:
        """The decision to record now, or the approval the call must wait for."""
        if self.log is None:
            if decision.outcome == "ask":
                return _unheld(decision)
            return decision
        rule_id = handler_id = None
        timeout_s, on_timeout = DEFAULT_TIMEOUT_S, "deny"
        secret = ev.tool_name is not None and ev.tool_name in redacted_tools
        summary = None if secret else _summary(ev, decision)
        ruled = decision.policy
        if decision.outcome == "ask" and ruled is not None and ruled.enforced:
            # A policy rule asks: it names itself and says how long a person has.
            rule_id = f"policy:{ruled.rule_id}"
            timeout_s, on_timeout = ruled.timeout_s, ruled.on_timeout
        elif decision.outcome == "ask":
            handler_id = decision.runs[-1].handler_id if decision.runs else None
        elif decision.outcome in ("pass", "modify") and ev.event in APPROVAL_EVENTS:
            per_workspace = self.rules.per_workspace
            workspace = (self.log.workspace(session_id) or "") if per_workspace else ""
            rule = self.rules.first(ev.tool_name, summary, workspace)
            if rule is None:
                return decision
            rule_id, timeout_s, on_timeout = rule.id, rule.timeout_s, rule.on_timeout
        else:
            return decision
        tool = ev.tool_name or ""
        allowance = self.log.allowance(session_id, tool)
        if allowance is not None:
            # Read once per such call, so the record names the operator who allowed it.
            return allowed_for_session(decision, allowance, self.log.load(allowance))
        approval = self._find_or_request(
            session_id,
            ev,
            dispatch_id,
            decision,
            summary,
            rule_id,
            handler_id,
            timeout_s,
            on_timeout,
            received,
        )
        if approval.status != PENDING:
            return settled_decision(decision, approval, 0)
        left = (approval.deadline - received).total_seconds()
        wait_s = max(0.0, min(left, budget_s if budget_s is not None else left))
        return PendingApproval(
            approval, session_id, ev, dispatch_id, decision, actor, render, received, wait_s
        )

    def _find_or_request(
        self,
        session_id: UUID,
        ev: LifecycleEvent,
        dispatch_id: UUID,
        decision: Decision,
        summary: str | None,
        rule_id: str | None,
        handler_id: str | None,
        timeout_s: int,
        on_timeout: str,
        received: datetime,
    ) -> Approval:
        assert self.log is not None
        reused = self.log.reusable(session_id, ev.tool_name or "", summary)
        if reused is not None:
            found = self.log.load(reused)
            if found is not None:
                return found
        stored = self.log.load(approval_id(dispatch_id))
        if stored is not None:
            return stored  # a redelivered hook of a call already asked about
        asked = Approval(
            dispatch_id=dispatch_id,
            session_id=session_id,
            workspace_id=self.log.workspace(session_id) or "",
            event_name=ev.event,
            turn_id=ev.turn_id,
            agent=ev.agent,
            tool_name=ev.tool_name,
            tool_call_id=ev.tool_call_id,
            input_summary=summary,
            rule_id=rule_id,
            handler_id=handler_id,
            # The asking handler's reason, redacted like every text the log keeps.
            reason=redact_optional(decision.reason) if decision.outcome == "ask" else None,
            requested_at=received,
            deadline=received + timedelta(seconds=timeout_s),
            on_timeout=on_timeout,
        )
        requested = self.log.request(asked)
        if requested is asked and self._on_requested is not None:
            try:
                self._on_requested(requested)
            except Exception:  # noqa: BLE001 - a notification never changes the outcome
                logging.getLogger(__name__).exception("approval notification failed")
        return requested

    # --- a held call, once its wait ended ---------------------------------------------

    def still_pending(self, pending: PendingApproval) -> bool:
        """Whether the held call's approval is still undecided, as the log says now."""
        found = self.log.load(pending.approval_id) if self.log is not None else None
        return found is None or found.status == PENDING

    def settled(self, pending: PendingApproval, clock: Callable[[], datetime]) -> Decision:
        """The decision on a held call once its approval settled (or its wait ran out)."""
        assert self.log is not None
        now = clock()
        approval = self.log.load(pending.approval_id) or pending.approval
        if approval.status == PENDING and now >= approval.deadline - _EARLY_WAKE:
            approval = self.log.expire(approval.id, now)
        if approval.status == PENDING:
            return still_pending_decision(pending.asked, approval)  # the runtime could not wait
        waited_ms = max(0, int((now - pending.received).total_seconds() * 1000))
        return settled_decision(pending.asked, approval, waited_ms)

    def abandoned(self, pending: PendingApproval, clock: Callable[[], datetime]) -> Decision:
        """The held call's caller went away before its approval settled: the approval is
        abandoned (a decision afterwards is refused) and the call recorded as still asking,
        since no answer reached the runtime. A settlement stored first stands instead."""
        assert self.log is not None
        now = clock()
        approval = self.log.abandon(pending.approval_id, now)
        if approval.status != ABANDONED:
            return self.settled(pending, clock)
        waited_ms = max(0, int((now - pending.received).total_seconds() * 1000))
        return abandoned_decision(pending.asked, approval, waited_ms)


def _summary(ev: LifecycleEvent, decision: Decision) -> str | None:
    """The redacted input summary of the call as it would run (after any rewrite)."""
    effective: Any = ev.tool_input
    if decision.replacement is not None and decision.outcome in ("modify", "ask"):
        effective = decision.replacement
    if effective is None or effective == REDACTED:
        return None
    redacted, _ = redacted_input(effective)
    return input_summary(ev.tool_name, redacted)


def _unheld(decision: Decision) -> Decision:
    """Where nothing can hold a call (no approvals wired in), `ask` is refused."""
    why = "An approval was asked for, but this path cannot wait for one; denied."
    return Decision(
        "deny", why, decision.additional_context, None, decision.runs, policy=decision.policy
    )
