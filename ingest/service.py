"""HookIngest: one lifecycle event in, its decision out, recorded as one HookDispatch.

Every route that takes hooks (the generic events route, Claude Code over HTTP and
its command hook, Coder) and the task runtime call this service, with the event
already mapped by their adapter (domain/lifecycle.py). The decision itself is the
domain's pure `decide`; this service does the I/O around it, through its ports.

Two ways in, one set of rules:
- `ingest` blocks (a thread pool's thread): session rules, handlers, the record.
- `start` never blocks (an event loop): only for a session this process knows and an
  event no handler matches, which is nearly every hook. It queues the record on the
  group commit and replies once durable. False means "use `ingest`".
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

from eventsourcing.domain import DomainEventProtocol
from eventsourcing.persistence import IntegrityError

from domain.agent_ids import agent_id_for
from domain.approval import (
    ABANDONED as APPROVAL_ABANDONED,
)
from domain.approval import (
    APPROVAL_HANDLER,
    abandoned_decision,
    settled_decision,
    still_pending,
)
from domain.approval import PENDING as APPROVAL_PENDING
from domain.approval_rules import ApprovalRules
from domain.dispatch_facts import dispatch_facts
from domain.dispatch_text import recorded_decision, replayed, summary_hint, title_hint
from domain.hook_config import HookConfig, HookHandler
from domain.hook_dispatch import (
    CONTEXT_CAP,
    CONTEXT_SEPARATOR,
    OUTCOMES,
    PASS,
    Decision,
    Dispatch,
    HandlerCall,
    HandlerReply,
    HandlerRequest,
    Outcome,
    ToolPolicy,
    decide,
    match_key,
    redact_tool_input,
)
from domain.hook_dispatch_record import (
    HookDispatch,
    creation_event,
    dispatch_id_for,
    legacy_dispatch_id,
)
from domain.learned_delivery import combine
from domain.lifecycle import REPORTED_FIELDS, LifecycleEvent
from domain.session import Session
from ingest.approval_gate import ApprovalGate, PendingApproval
from ingest.known_sessions import KnownSessions
from ingest.ports import (
    AskHandler,
    Clock,
    Deliver,
    DispatchLog,
    DispatchObserver,
    LearnedSource,
    Render,
    SessionPort,
)

log = logging.getLogger(__name__)

# A held request's timer may fire a moment before its deadline: that still expires it.
_EARLY_WAKE = timedelta(milliseconds=100)
APPROVAL_RUN_PREFIX = APPROVAL_HANDLER + ":"
# A Stop `continue` is recorded on the session too; a concurrent change of the session
# (a rename) makes that append conflict, and the count is then re-read and retried.
_CONTINUE_RETRIES = 3
# Where an agent is told what it learned: every runtime's renderer carries context on
# these (SPEC §8), and they open a session or a turn, so each turn receives it once.
LEARNED_EVENTS = frozenset({"SessionStart", "UserPromptSubmit"})
# A denied prompt starts no turn: nothing is delivered with the refusal.
_LEARNED_OUTCOMES = frozenset({"pass", "modify"})


@dataclass(frozen=True, slots=True)
class Ingested:
    """The decision on one event, its answer for the runtime, and whether it is durable."""

    dispatch_id: UUID
    decision: Decision
    # The decision in the asking runtime's format (None without a renderer).
    answer: Any
    position: int | None
    recorded: bool
    duplicate: bool = False
    # Set when the call waits for an operator: nothing is recorded or answered yet; the
    # caller waits on the approval, then `HookIngest.settle` records and answers it.
    pending: PendingApproval | None = None

    def at(self, position: int) -> Ingested:
        """This decision, durably recorded at `position` (no dataclasses.replace: this
        runs once per event on the event loop)."""
        return Ingested(self.dispatch_id, self.decision, self.answer, position, True)


def _no_observer(event: str, decision: Decision) -> None:
    return None


def _utc_now() -> datetime:
    return datetime.now(UTC)


class HookIngest:
    """Runs the managed hook policy on lifecycle events and records each outcome."""

    def __init__(
        self,
        *,
        config: HookConfig,
        redacted_tools: frozenset[str],
        record_facts: bool = True,
        sessions: SessionPort,
        dispatches: DispatchLog,
        ask: AskHandler,
        known: KnownSessions | None = None,
        clock: Clock = _utc_now,
        observe: DispatchObserver = _no_observer,
        approvals: ApprovalGate | None = None,
        learned: LearnedSource | None = None,
    ) -> None:
        self.config = config
        self.redacted_tools = redacted_tools
        self.record_facts = record_facts
        self._sessions = sessions
        self._dispatches = dispatches
        self._ask = ask
        self.known = known if known is not None else KnownSessions()
        self._clock = clock
        self._observe = observe
        self.approvals = approvals if approvals is not None else ApprovalGate(ApprovalRules(), None)
        self._learned = learned

    # --- sessions ---------------------------------------------------------------------

    def require_session(self, session_id: UUID) -> None:
        """Raise NotFound unless the session exists and is live."""
        if session_id in self.known:
            return
        self._sessions.require(session_id)
        self.known.add(session_id)

    def ensure_session(self, session_id: UUID, workspace: str, ev: LifecycleEvent) -> None:
        """Create an agent's session on its first event (a concurrent create is fine)."""
        if session_id in self.known or self._sessions.exists(session_id):
            return
        self._sessions.create(session_id, workspace, ev.agent, ev.agent_session_id)

    def open_session(
        self, workspace: str, title: str | None, actor: str
    ) -> tuple[UUID, int | None, Ingested]:
        """Create a session, then dispatch its SessionStart."""
        session_id, position = self._sessions.open(workspace, title, actor)
        # This SessionStart's answer reaches no agent: it carries no learned content.
        started = self.ingest(
            session_id,
            LifecycleEvent("SessionStart", detail={"source": "api"}),
            actor=actor,
            deliver_learned=False,
        )
        return session_id, position, started

    def close_session(self, session_id: UUID, actor: str) -> int | None:
        """Dispatch SessionEnd first, then delete the session (SPEC §5)."""
        self._sessions.require(session_id, from_log=True)  # another replica may have deleted it
        ended = LifecycleEvent("SessionEnd", detail={"reason": "deleted"})
        self.ingest(session_id, ended, actor=actor)
        self.known.forget(session_id)
        return self._sessions.delete(session_id, actor)

    # --- events -----------------------------------------------------------------------

    def ingest(
        self,
        session_id: UUID,
        ev: LifecycleEvent,
        *,
        actor: str,
        render: Render | None = None,
        policy: ToolPolicy | None = None,
        create_in: str | None = None,
        may_hold: bool = False,
        budget_s: float | None = None,
        deliver_learned: bool = True,
    ) -> Ingested:
        """Apply the session rule, decide, record durably, return the decision.

        `create_in`: the workspace to create an agent's session in on its first event;
        None when the session must exist already (NotFound otherwise). `may_hold`: the
        caller can wait for an approval (an Ingested with `pending`), at most `budget_s`
        when the runtime waits less than the approval's deadline; a caller that cannot
        is told the call is still pending (a deny a retry may turn around).
        `deliver_learned`: False when the answer reaches no agent (no learned content).
        """
        received = self._clock()
        if create_in is None:
            self.require_session(session_id)
        else:
            self.ensure_session(session_id, create_in, ev)
        dispatch_id = dispatch_id_for(session_id, ev.event_id)
        handlers = self._handlers_for(ev)
        if ev.event_id and (handlers or self.approvals.may_hold(ev)):
            # Don't re-run handlers (or ask an operator again) for a retried event: answer
            # with the stored decision.
            stored = self._stored(session_id, dispatch_id, ev, render, legacy=True)
            if stored is not None:
                return stored
        session = self._sessions.load(session_id) if ev.event == "Stop" and handlers else None
        continues = session.stop_continues(ev.turn_id) if session is not None else 0
        decision = self._decide(session_id, ev, dispatch_id, handlers, policy, continues, received)
        if decision.outcome == "ask" or self.approvals.may_hold(ev):
            gated = self.approvals.gate(
                session_id,
                ev,
                dispatch_id,
                decision,
                actor=actor,
                render=render,
                received=received,
                budget_s=budget_s,
                redacted_tools=self.redacted_tools,
            )
            if isinstance(gated, PendingApproval):
                if may_hold:
                    return Ingested(dispatch_id, decision, None, None, False, pending=gated)
                gated = still_pending(decision, gated.approval)
            decision = gated
        return self._finish(
            session_id, ev, dispatch_id, decision, actor, render, received, session, deliver_learned
        )

    def still_pending(self, pending: PendingApproval) -> bool:
        """Whether the held call's approval is still undecided, as the log says now."""
        approvals = self.approvals.log
        found = approvals.load(pending.approval_id) if approvals is not None else None
        return found is None or found.status == APPROVAL_PENDING

    def settle(self, pending: PendingApproval) -> Ingested:
        """Record and answer a held call once its approval settled (or its wait ran out)."""
        approvals = self.approvals.log
        assert approvals is not None
        now = self._clock()
        approval = approvals.load(pending.approval_id) or pending.approval
        if approval.status == APPROVAL_PENDING and now >= approval.deadline - _EARLY_WAKE:
            approval = approvals.expire(approval.id, now)
        if approval.status == APPROVAL_PENDING:
            decision = still_pending(pending.asked, approval)  # the runtime could not wait
        else:
            waited_ms = max(0, int((now - pending.received).total_seconds() * 1000))
            decision = settled_decision(pending.asked, approval, waited_ms)
        return self._finish(
            pending.session_id,
            pending.ev,
            pending.dispatch_id,
            decision,
            pending.actor,
            pending.render,
            pending.received,
            None,
        )

    def abandon(self, pending: PendingApproval) -> Ingested:
        """The held call's caller went away before its approval settled: the approval is
        abandoned (a decision afterwards is refused) and the call recorded as still asking,
        since no answer reached the runtime. A settlement stored first stands instead."""
        approvals = self.approvals.log
        assert approvals is not None
        now = self._clock()
        approval = approvals.abandon(pending.approval_id, now)
        if approval.status != APPROVAL_ABANDONED:
            return self.settle(pending)
        waited_ms = max(0, int((now - pending.received).total_seconds() * 1000))
        return self._finish(
            pending.session_id,
            pending.ev,
            pending.dispatch_id,
            abandoned_decision(pending.asked, approval, waited_ms),
            pending.actor,
            pending.render,
            pending.received,
            None,
        )

    def _finish(
        self,
        session_id: UUID,
        ev: LifecycleEvent,
        dispatch_id: UUID,
        decision: Decision,
        actor: str,
        render: Render | None,
        received: datetime,
        session: Session | None,
        deliver_learned: bool = True,
    ) -> Ingested:
        """Render the decision, record it durably, and say where."""
        delivered, carried = (
            self._with_learned(session_id, ev, decision) if deliver_learned else (decision, None)
        )
        answer, note = render(ev.event, delivered) if render is not None else (None, None)
        fields = self._record(session_id, ev, dispatch_id, decision, note, actor, received, carried)
        created = creation_event(**fields)
        try:
            position = self._append(session_id, ev, dispatch_id, decision, created, session)
        except IntegrityError:
            stored = self._stored(session_id, dispatch_id, ev, render)
            if stored is not None:
                return stored
            raise
        except Exception:  # noqa: BLE001 - a recording failure never changes the outcome
            log.exception("hook dispatch could not be recorded", extra={"dispatch_id": dispatch_id})
            return self._unrecorded(ev, dispatch_id, decision, render)
        self.known.add(session_id)
        return Ingested(dispatch_id, delivered, answer, position, True)

    def _unrecorded(
        self, ev: LifecycleEvent, dispatch_id: UUID, decision: Decision, render: Render | None
    ) -> Ingested:
        """The answer to a decision that could not be recorded: without learned content,
        which is only ever delivered on the record."""
        answer = render(ev.event, decision)[0] if render is not None else None
        return Ingested(dispatch_id, decision, answer, None, False)

    def start(
        self,
        session_id: UUID,
        ev: LifecycleEvent,
        *,
        actor: str,
        reply: Any,
        deliver: Deliver | None = None,
        render: Render | None = None,
        policy: ToolPolicy | None = None,
    ) -> bool:
        """Begin an ingest that needs no blocking I/O; False when it needs `ingest`.

        `reply` gets the Ingested once durable (through `deliver` when given), or an
        IntegrityError for a retried eventId, which `ingest` answers from the log.
        """
        if session_id not in self.known or self._handlers_for(ev) or self.approvals.may_hold(ev):
            return False
        received = self._clock()
        dispatch_id = dispatch_id_for(session_id, ev.event_id)
        decision = self._decide(session_id, ev, dispatch_id, [], policy, 0, received)
        delivered, carried = self._with_learned(session_id, ev, decision)
        answer, note = render(ev.event, delivered) if render is not None else (None, None)
        decided = Ingested(dispatch_id, delivered, answer, None, False)

        def build() -> list[DomainEventProtocol[UUID]]:
            # In the committing thread, not on the event loop that serves every request's
            # HTTP: the facts (redaction, digest, JSON) and the event are built there
            # (Claude route +8% events/s with facts, docs/performance.md).
            fields = self._record(
                session_id, ev, dispatch_id, decision, note, actor, received, carried
            )
            return [creation_event(**fields)]

        def settle(outcome: int | BaseException) -> None:
            if isinstance(outcome, int):
                reply(decided.at(outcome))
            elif isinstance(outcome, IntegrityError):
                reply(outcome)
            else:
                log.error("hook dispatch could not be recorded: %s", outcome)
                reply(
                    decided
                    if carried is None
                    else self._unrecorded(ev, dispatch_id, decision, render)
                )

        self._dispatches.enqueue(dispatch_id, build, settle, deliver)
        return True

    # --- the parts --------------------------------------------------------------------

    def _with_learned(
        self, session_id: UUID, ev: LifecycleEvent, decision: Decision
    ) -> tuple[Decision, list[dict[str, Any]] | None]:
        """The decision as the agent gets it: the managed handlers' context and the
        agent's learned content within the one context cap (the learned text gets what
        the handlers left); and the learned items it carries, None when none."""
        if (
            self._learned is None
            or ev.event not in LEARNED_EVENTS
            or decision.outcome not in _LEARNED_OUTCOMES
        ):
            return decision, None
        context = decision.additional_context
        used = len(context.encode("utf-8")) + len(CONTEXT_SEPARATOR) if context else 0
        try:
            composed = self._learned(agent_id_for(ev.agent), CONTEXT_CAP - used, session_id)
        except Exception:  # noqa: BLE001 - a delivery never fails or blocks a hook
            log.exception("learned content could not be composed")
            return decision, None
        if composed.text is None:
            return decision, None
        delivered = Decision(
            decision.outcome,
            decision.reason,
            combine(context, composed.text, CONTEXT_SEPARATOR),
            decision.replacement,
            decision.runs,
            decision.approved,
        )
        return delivered, list(composed.items)

    def _redelivered(
        self, ev: LifecycleEvent, decision: Decision, stored: HookDispatch
    ) -> Decision:
        """A retried event's answer: with the learned content it was first given, when
        that is still what the agent would get now (same targets, same digests); else
        without it, since what it carries must be what the record says."""
        recorded = getattr(stored, "learned", None)
        if not recorded:
            return decision
        delivered, carried = self._with_learned(stored.session_id, ev, decision)
        return delivered if carried == recorded else decision

    def _handlers_for(self, ev: LifecycleEvent) -> list[HookHandler]:
        return self.config.handlers_for(ev.event, match_key(ev.event, ev.tool_name, ev.subagent_id))

    def _decide(
        self,
        session_id: UUID,
        ev: LifecycleEvent,
        dispatch_id: UUID,
        handlers: list[HookHandler],
        policy: ToolPolicy | None,
        continues: int,
        received: datetime,
    ) -> Decision:
        if not handlers and (policy is None or ev.event != "PreToolUse"):
            decision = PASS
        else:
            dispatch = Dispatch(
                request=self._request(session_id, ev, dispatch_id, received),
                policy=policy,
                policy_input=ev.tool_input,
                cwd=_working_directory(ev) if policy is not None else None,
                stop_continues_so_far=continues,
            )
            decision = run_handlers(dispatch, handlers, self._ask)
        try:
            self._observe(ev.event, decision)
        except Exception:  # noqa: BLE001 - observation never changes a decision
            log.exception("dispatch observer failed")
        return decision

    def _request(
        self, session_id: UUID, ev: LifecycleEvent, dispatch_id: UUID, received: datetime
    ) -> HandlerRequest:
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
            tool_input=redact_tool_input(ev.tool_name, ev.tool_input, self.redacted_tools),
            tool_response=redact_tool_input(ev.tool_name, ev.tool_response, self.redacted_tools),
            prompt=ev.prompt,
            last_assistant_message=ev.last_assistant_message,
            subagent_id=ev.subagent_id,
            detail=ev.detail,
            **{name: getattr(ev, name) for name in REPORTED_FIELDS},
        )

    def _record(
        self,
        session_id: UUID,
        ev: LifecycleEvent,
        dispatch_id: UUID,
        decision: Decision,
        note: str | None,
        actor: str,
        received: datetime,
        learned: list[dict[str, Any]] | None = None,
    ) -> dict[str, Any]:
        """The fields of the HookDispatch that records this decision (its context is the
        handlers'; the learned content it carried is recorded by reference, `learned`)."""
        return {
            "dispatch_id": dispatch_id,
            "session_id": session_id,
            "event_name": ev.event,
            "event_id": ev.event_id,
            "turn_id": ev.turn_id,
            "agent": ev.agent,
            "agent_session_id": ev.agent_session_id,
            "tool_name": ev.tool_name,
            "tool_call_id": ev.tool_call_id,
            "subagent_id": ev.subagent_id,
            "outcome": decision.outcome,
            # The recorded copy of every text is redacted; the answer is not (see
            # domain/dispatch_text.py).
            **recorded_decision(decision),
            "title_hint": title_hint(ev.prompt) if ev.event == "UserPromptSubmit" else None,
            "summary_hint": summary_hint(ev.last_assistant_message) if ev.event == "Stop" else None,
            "note": note,
            "actor": actor,
            "facts": dispatch_facts(ev, decision, self.redacted_tools)
            if self.record_facts
            else None,
            "received_at": received,
            "learned": learned,
        }

    def _append(
        self,
        session_id: UUID,
        ev: LifecycleEvent,
        dispatch_id: UUID,
        decision: Decision,
        created: DomainEventProtocol[UUID],
        session: Session | None,
    ) -> int:
        """Record the dispatch; an honoured Stop `continue` is counted on its session in
        the same transaction, so the per-turn cap never waits for a read model."""
        if session is None or decision.outcome != "continue":
            return self._dispatches.record(dispatch_id, [created])
        for _ in range(_CONTINUE_RETRIES - 1):
            session.stop_continued(ev.turn_id, dispatch_id)
            try:
                return self._dispatches.record(dispatch_id, [created, *session.collect_events()])
            except IntegrityError:
                reloaded = self._sessions.load(session_id)
                if self._dispatches.stored(dispatch_id) is not None or reloaded is None:
                    raise
                session = reloaded
        session.stop_continued(ev.turn_id, dispatch_id)
        return self._dispatches.record(dispatch_id, [created, *session.collect_events()])

    def _stored(
        self,
        session_id: UUID,
        dispatch_id: UUID,
        ev: LifecycleEvent,
        render: Render | None,
        *,
        legacy: bool = False,
    ) -> Ingested | None:
        """The answer a retried event got, from its stored dispatch; None when none.

        `legacy`: also look under the id earlier releases gave the eventId (one for every
        session), and take what is there only when that dispatch is of this very session:
        a retry that crosses an upgrade still gets its stored decision, while another
        session's event with the same eventId is never answered from it. Only the paths
        that read the log before deciding look (handlers to run, a call an operator may
        hold); the hot path does not spend a read on it, so a retry across an upgrade of
        an event no handler matches is recorded once more (docs/hooks.md).
        """
        stored = self._dispatches.stored(dispatch_id)
        if stored is None and legacy and ev.event_id:
            dispatch_id = legacy_dispatch_id(ev.event_id)
            stored = self._dispatches.stored(dispatch_id)
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
        decision = self._redelivered(ev, decision, stored)
        answer = render(ev.event, decision)[0] if render is not None else None
        return Ingested(
            dispatch_id, decision, answer, self._dispatches.head(), True, duplicate=True
        )


def run_handlers(dispatch: Dispatch, handlers: list[HookHandler], ask: AskHandler) -> Decision:
    """Ask each handler the domain names, in turn, until it has decided."""
    replies: list[HandlerReply] = []
    step = decide(dispatch, handlers, replies)
    while isinstance(step, HandlerCall):
        replies.append(ask(step.handler, step.request))
        step = decide(dispatch, handlers, replies)
    return step


def stored_outcome(outcome: str) -> Outcome:
    """A recorded outcome; anything else (never written) reads as the safe side, deny."""
    # `ask` is never recorded (an approval settles it first); read as deny all the same.
    return outcome if outcome in OUTCOMES and outcome != "ask" else "deny"  # type: ignore[return-value]


def _working_directory(ev: LifecycleEvent) -> str | None:
    """The `cwd` a runtime reported with the call (Claude Code does), when absolute:
    relative paths in the call are judged from there, not from the clone's root."""
    cwd = ev.cwd
    return cwd if cwd is not None and cwd.startswith("/") else None
