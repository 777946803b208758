"""Approval: a tool call held open until an operator allows or denies it, or time runs out.

pending → decided (allow | deny, by an operator key) | expired (the rule's `onTimeout`)
| abandoned (the held hook request's caller went away before anyone decided: the runtime
stopped waiting and did whatever it does on a hook timeout, so no decision can reach it).
Exactly one of Decided, Expired and Abandoned follows Requested: each is the aggregate's
second event, so a decision racing the deadline or the caller's departure loses to
whichever was stored first.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Final, Literal
from uuid import UUID

from eventsourcing.domain import event

from domain.base import TachographAggregate, declare_event_versions
from domain.errors import InvalidState, RuleViolation
from domain.hook_dispatch import Decision, HandlerRun, Outcome
from domain.ids import stable_id

PENDING, DECIDED, EXPIRED, ABANDONED = "pending", "decided", "expired", "abandoned"
APPROVAL_STATES: Final = (PENDING, DECIDED, EXPIRED, ABANDONED)
ALLOW, DENY = "allow", "deny"
Verdict = Literal["allow", "deny"]
VERDICTS: Final = (ALLOW, DENY)
REASON_LIMIT: Final = 2000


def approval_id(dispatch_id: UUID) -> UUID:
    """One approval per dispatch: a redelivered hook waits on the same request."""
    return stable_id("approval", str(dispatch_id))


class Approval(TachographAggregate):
    """A request for a person's decision about one tool call, and its one outcome."""

    TOPIC = "Approval"

    @staticmethod
    def create_id(dispatch_id: UUID, **_: Any) -> UUID:
        return approval_id(dispatch_id)

    @event("Created", topic="Approval.Requested")
    def __init__(
        self,
        dispatch_id: UUID,
        session_id: UUID,
        workspace_id: str,
        event_name: str,
        turn_id: str | None,
        agent: str | None,
        tool_name: str | None,
        tool_call_id: str | None,
        input_summary: str | None,
        rule_id: str | None,
        handler_id: str | None,
        reason: str | None,
        requested_at: datetime,
        deadline: datetime,
        on_timeout: str,
    ) -> None:
        self.dispatch_id = dispatch_id
        self.session_id = session_id
        self.workspace_id = workspace_id
        self.event_name = event_name
        self.tool_name = tool_name
        self.input_summary = input_summary
        self.rule_id = rule_id
        self.handler_id = handler_id
        self.deadline = deadline
        self.on_timeout = on_timeout
        self.status = PENDING
        self.verdict: str | None = None
        self.actor: str | None = None
        self.reason: str | None = reason
        self.for_session = False

    def decide(
        self, verdict: str, actor: str, reason: str | None, for_session: bool, at: datetime
    ) -> None:
        """An operator's answer; only while pending (409 naming the state otherwise)."""
        if verdict not in VERDICTS:
            raise RuleViolation(f"decision must be one of {', '.join(VERDICTS)}.")
        if for_session and verdict != ALLOW:
            raise RuleViolation("forSession applies to an allow decision only.")
        if reason is not None and len(reason) > REASON_LIMIT:
            raise RuleViolation(f"reason is longer than {REASON_LIMIT} characters.")
        if self.status == ABANDONED:
            raise Abandoned(self.id)
        if self.status != PENDING:
            raise InvalidState("Approval", self.status, DECIDED)
        self._decided(verdict, actor, reason, for_session, at)

    @event("Decided", topic="Approval.Decided")
    def _decided(
        self, verdict: str, actor: str, reason: str | None, for_session: bool, at: datetime
    ) -> None:
        self.status = DECIDED
        self.verdict = verdict
        self.actor = actor
        self.reason = reason
        self.for_session = for_session

    def expire(self, at: datetime) -> None:
        """The deadline passed with no decision: the rule's timeout outcome stands."""
        if self.status != PENDING:
            raise InvalidState("Approval", self.status, EXPIRED)
        self._expired(self.on_timeout, at)

    @event("Expired", topic="Approval.Expired")
    def _expired(self, verdict: str, at: datetime) -> None:
        self.status = EXPIRED
        self.verdict = verdict
        self.actor = "system"

    def abandon(self, at: datetime) -> None:
        """The held request's caller is gone (connection closed, client timed out): no
        answer can reach the runtime any more, so nobody may decide it afterwards."""
        if self.status != PENDING:
            raise InvalidState("Approval", self.status, ABANDONED)
        self._abandoned(at)

    @event("Abandoned", topic="Approval.Abandoned")
    def _abandoned(self, at: datetime) -> None:
        self.status = ABANDONED
        self.actor = "system"


class Abandoned(InvalidState):
    """A decision on an approval whose caller stopped waiting: 409 saying why."""

    def __init__(self, approval_id: UUID) -> None:
        super().__init__("Approval", ABANDONED, DECIDED)
        self.message = (
            f"Approval {approval_id} is abandoned: the agent's hook stopped waiting for it "
            "(the runtime's hook timeout passed or its connection closed) before anyone "
            "decided, so no decision can reach the call any more; it cannot become decided."
        )
        self.args = (self.message,)


declare_event_versions(Approval, Created=1, Decided=1, Expired=1, Abandoned=1)

APPROVAL_HANDLER: Final = "approval"


def approval_record(approval: Approval) -> dict[str, Any]:
    """What an approval's run records of it: the request, the rule or handler that asked,
    how it settled and, when a person decided, who and why (read back as `decidedBy`)."""
    decided = approval.status == DECIDED
    return {
        "id": str(approval.id),
        "rule_id": approval.rule_id,
        "handler_id": approval.handler_id,
        "status": approval.status,
        "verdict": approval.verdict,
        "operator": approval.actor if decided else None,
        "reason": approval.reason if decided else None,
        "for_session": approval.for_session,
    }


def settled_decision(asked: Decision, approval: Approval, waited_ms: int) -> Decision:
    """What the agent is told once an approval settled: the call as asked (rewritten, if
    a handler rewrote it before asking), or a deny saying who or what refused it."""
    source = approval.rule_id or approval.handler_id or "handler"
    run_id = f"{APPROVAL_HANDLER}:{source}"
    who = approval.actor or "an operator"
    if approval.verdict == ALLOW:
        if approval.status == EXPIRED:
            why = (
                f"no decision within the deadline; allowed by rule {source!r} "
                f"(approval {approval.id})"
            )
        else:
            scope = " for the rest of the session" if approval.for_session else ""
            why = f"allowed{scope} by {who} (approval {approval.id})"
            if approval.reason:
                why += f": {approval.reason}"
        run = HandlerRun(run_id, "pass", None, why, waited_ms, approval=approval_record(approval))
        return _allowed(asked, run)
    if approval.status == ABANDONED:
        why = (
            f"This call's request for approval (approval {approval.id}) was abandoned when "
            "an earlier hook stopped waiting for it; make the call again to ask anew."
        )
    elif approval.status == EXPIRED:
        why = (
            "No operator decided within the deadline, so the call was denied "
            f"(approval {approval.id})."
        )
    else:
        why = f"Denied by {who} (approval {approval.id})" + (
            f": {approval.reason}" if approval.reason else "."
        )
    run = HandlerRun(run_id, "deny", None, why, waited_ms, approval=approval_record(approval))
    return Decision(
        "deny", why, asked.additional_context, None, (*asked.runs, run), policy=asked.policy
    )


def _answered(outcome: Outcome, why: str, asked: Decision, run: HandlerRun) -> Decision:
    """The held call's decision: the asked one's context and policy rule, and the run."""
    return Decision(
        outcome, why, asked.additional_context, None, (*asked.runs, run), policy=asked.policy
    )


def allowed_for_session(
    asked: Decision, allowance: UUID, granted: Approval | None = None
) -> Decision:
    """A call of a tool an operator allowed for the session: it passes, and says why
    (`granted`, the approval that allowed it, names the operator when it can be read)."""
    why = f"allowed for the rest of the session by approval {allowance}"
    record = approval_record(granted) if granted is not None else None
    if record is None:
        record = {"id": str(allowance), "status": DECIDED, "verdict": ALLOW, "for_session": True}
    run = HandlerRun(f"{APPROVAL_HANDLER}:session", "pass", None, why, 0, approval=record)
    return _allowed(asked, run)


def _allowed(asked: Decision, run: HandlerRun) -> Decision:
    """The call as asked (with a handler's rewrite, if any), approved, and the run saying
    why."""
    outcome: Outcome = "modify" if asked.replacement is not None else "pass"
    reason = asked.reason if outcome == "modify" else None
    return Decision(
        outcome,
        reason,
        asked.additional_context,
        asked.replacement,
        (*asked.runs, run),
        approved=True,
        policy=asked.policy,
    )


ABANDONED_RUN: Final = f"{APPROVAL_HANDLER}:abandoned"


def abandoned_decision(asked: Decision, approval: Approval, waited_ms: int) -> Decision:
    """What the log keeps for a held call whose caller went away: still `ask`, since no
    answer reached the runtime, which decided on its own whether the call ran (its
    PostToolUse, if one comes, says it did)."""
    why = (
        f"No decision reached the agent: its hook stopped waiting after {waited_ms / 1000:.1f} s, "
        f"before anyone decided (approval {approval.id} abandoned)."
    )
    run = HandlerRun(ABANDONED_RUN, "ask", None, why, waited_ms)
    return Decision(
        "ask", why, asked.additional_context, None, (*asked.runs, run), policy=asked.policy
    )


def still_pending(asked: Decision, approval: Approval) -> Decision:
    """The runtime cannot wait as long as a person needs: deny, and say a retry may pass."""
    why = (
        f"Waiting for an operator's approval of this call (approval {approval.id}); "
        "it has not been decided yet. Try the same call again shortly."
    )
    record = approval_record(approval)
    run = HandlerRun(f"{APPROVAL_HANDLER}:pending", "deny", None, why, 0, approval=record)
    return Decision(
        "deny", why, asked.additional_context, None, (*asked.runs, run), policy=asked.policy
    )
