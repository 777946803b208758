"""HookIngest: one lifecycle event in, its decision out, recorded as one HookDispatch.

Every route that takes hooks (the generic events route, each runtime's hook route,
Coder) and the task runtime call `HookIngest.ingest`, with the event already mapped by
its runtime's adapter (ingest/runtimes/). The decision itself is the domain's pure
`decide`; this service does the I/O around it, through its ports.

One entry, one set of rules. `ingest` is a coroutine: the hook routes await it on the
server's event loop, and threads with no loop (the task executor, synchronous routes)
drive it with ingest/loop.py's `run_sync`. Where a step runs is the ports' business:
a blocking step (a session to look up or create, handlers to ask, an approval to open)
is `offload`ed, which on a loop means a worker thread; the record is the dispatch log's
`append`, which on a loop joins the group commit and wakes the loop once per batch.
Nearly every hook (a known session, no handler matching, no approval rule that may hold
it) has no blocking step at all, so on a loop it never leaves it before the commit.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial
from typing import Any
from uuid import UUID

from eventsourcing.domain import DomainEventProtocol
from eventsourcing.persistence import IntegrityError

from domain.approval import still_pending
from domain.approval_rules import ApprovalRules
from domain.hook_config import HookConfig, HookHandler
from domain.hook_dispatch import (
    PASS,
    Decision,
    Dispatch,
    HandlerCall,
    HandlerReply,
    ToolPolicy,
    decide,
    match_key,
)
from domain.hook_dispatch_record import dispatch_id_for
from domain.lifecycle import LifecycleEvent
from domain.policy.verdict import PolicyVerdict
from domain.session import Session
from ingest.approval_gate import ApprovalGate, PendingApproval
from ingest.held_approvals import GONE, HeldApprovals
from ingest.known_sessions import KnownSessions
from ingest.learned import with_learned
from ingest.loop import offload, run_sync
from ingest.ports import (
    AskHandler,
    Clock,
    DecisionSink,
    DispatchLog,
    DispatchObserver,
    LearnedSource,
    Offload,
    PolicyPort,
    Render,
    SessionPort,
)
from ingest.records import dispatch_created, handler_request
from ingest.replay import stored_answer

log = logging.getLogger(__name__)

# A Stop `continue` is recorded on the session too; a concurrent change of the session
# (a rename) makes that append conflict, and the count is then re-read and retried.
_CONTINUE_RETRIES = 3


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


@dataclass(frozen=True, slots=True)
class Rules:
    """What decides a call, and what is kept of it."""

    hooks: HookConfig
    approvals: ApprovalGate = field(default_factory=lambda: ApprovalGate(ApprovalRules(), None))
    redacted_tools: frozenset[str] = frozenset()
    record_facts: bool = True
    # The operator's policy rules (docs/policy.md); None: none are configured here.
    policy: PolicyPort | None = None


@dataclass(frozen=True, slots=True)
class Ports:
    """Where the service reads, asks, waits and records (ingest/ports.py names each)."""

    sessions: SessionPort
    dispatches: DispatchLog
    ask: AskHandler
    learned: LearnedSource | None = None
    # Held calls wait here, on the event loop; None: no call is ever held.
    held: HeldApprovals | None = None
    offload: Offload = offload


@dataclass(frozen=True, slots=True)
class Hold:
    """A caller that can wait for an operator's decision on its call.

    `gone` makes an awaitable that completes when the caller leaves (None: no way to
    tell); `until` is a `time.monotonic()` deadline for a caller that waits less than
    any approval would (Coder).
    """

    gone: Any = None  # Callable[[], Awaitable[None] | None]
    until: float | None = None


@dataclass(frozen=True, slots=True)
class _Judged:
    decision: Decision
    session: Session | None


def _no_observer(event: str, decision: Decision) -> None:
    return None


def _utc_now() -> datetime:
    return datetime.now(UTC)


class HookIngest:
    """Runs the managed hook policy on lifecycle events and records each outcome."""

    def __init__(
        self,
        rules: Rules,
        ports: Ports,
        *,
        known: KnownSessions | None = None,
        clock: Clock = _utc_now,
        observe: DispatchObserver = _no_observer,
        export: DecisionSink | None = None,
    ) -> None:
        self.rules = rules
        self.config = rules.hooks
        self.approvals = rules.approvals
        self.redacted_tools = rules.redacted_tools
        self._sessions = ports.sessions
        self._dispatches = ports.dispatches
        self._ask = ports.ask
        self._learned = ports.learned
        self._held = ports.held
        self.offload = ports.offload
        self.known = known if known is not None else KnownSessions()
        self._clock = clock
        self._observe = observe
        self._export = export

    # --- sessions ---------------------------------------------------------------------

    def open_session(
        self, workspace: str, title: str | None, actor: str
    ) -> tuple[UUID, int | None, Ingested]:
        """Create a session, then dispatch its SessionStart (from a thread with no loop)."""
        session_id, position = self._sessions.open(workspace, title, actor)
        # This SessionStart's answer reaches no agent: it carries no learned content.
        start = LifecycleEvent("SessionStart", detail={"source": "api"})
        started = run_sync(self.ingest(session_id, start, actor=actor, deliver_learned=False))
        return session_id, position, started

    def close_session(self, session_id: UUID, actor: str) -> int | None:
        """Dispatch SessionEnd first, then delete the session (SPEC §5); from a thread
        with no loop."""
        self._sessions.require(session_id, from_log=True)  # another replica may have deleted it
        ended = LifecycleEvent("SessionEnd", detail={"reason": "deleted"})
        run_sync(self.ingest(session_id, ended, actor=actor))
        self.known.forget(session_id)
        return self._sessions.delete(session_id, actor)

    def _admit(self, session_id: UUID, create_in: str | None, ev: LifecycleEvent) -> None:
        """NotFound unless the session exists and is live; with `create_in`, create an
        agent's session on its first event instead (a concurrent create is fine)."""
        if create_in is None:
            self._sessions.require(session_id)
            self.known.add(session_id)
        elif not self._sessions.exists(session_id):
            self._sessions.create(session_id, create_in, ev.agent, ev.agent_session_id)

    # --- the one entry ----------------------------------------------------------------

    async def ingest(
        self,
        session_id: UUID,
        ev: LifecycleEvent,
        *,
        actor: str,
        render: Render | None = None,
        policy: ToolPolicy | None = None,
        create_in: str | None = None,
        hold: Hold | None = None,
        budget_s: float | None = None,
        deliver_learned: bool = True,
    ) -> Ingested:
        """Apply the session rule, decide, record durably, return the decision.

        `create_in`: the workspace to create an agent's session in on its first event;
        None when the session must exist already (NotFound otherwise). `hold`: the
        caller can wait for an operator's approval (on an event loop only), at most
        `budget_s` when the runtime waits less than the approval's deadline; a caller
        that cannot is told the call is still pending (a deny a retry may turn around).
        `deliver_learned`: False when the answer reaches no agent (no learned content).
        """
        received = self._clock()
        if session_id not in self.known:
            await self.offload(partial(self._admit, session_id, create_in, ev))
        dispatch_id = dispatch_id_for(session_id, ev.event_id)
        handlers = self._handlers_for(ev)
        rules = self.rules.policy
        # Judged here, on the caller's thread: compiled rules, answered from memory.
        verdict = rules.judge(session_id, ev) if rules and rules.applies(ev.event) else None
        if not handlers and not self.approvals.may_hold(ev) and not (verdict and verdict.holds):
            # Nearly every hook: nothing to ask, nothing to hold, nothing blocks.
            decision = self._decide(session_id, ev, dispatch_id, [], policy, 0, received, verdict)
            return await self._finish(
                session_id, ev, dispatch_id, decision, actor, render, received, None,
                deliver_learned,
            )  # fmt: skip
        can_hold = hold is not None and self._held is not None
        judged = await self.offload(
            partial(
                self._judge,
                session_id,
                ev,
                dispatch_id,
                handlers,
                actor,
                render,
                policy,
                received,
                budget_s,
                can_hold,
                verdict,
            )  # fmt: skip
        )
        if isinstance(judged, Ingested):
            return judged  # a retried event: its stored answer
        if isinstance(judged, PendingApproval):
            assert hold is not None
            return await self._wait_for_operator(judged, hold)
        return await self._finish(
            session_id, ev, dispatch_id, judged.decision, actor, render, received,
            judged.session, deliver_learned,
        )  # fmt: skip

    def _judge(
        self,
        session_id: UUID,
        ev: LifecycleEvent,
        dispatch_id: UUID,
        handlers: list[HookHandler],
        actor: str,
        render: Render | None,
        policy: ToolPolicy | None,
        received: datetime,
        budget_s: float | None,
        can_hold: bool,
        verdict: PolicyVerdict | None,
    ) -> Ingested | PendingApproval | _Judged:
        """The blocking part of a decision: the stored answer of a retried event, the
        handlers' replies, and the approval the call may have to wait for."""
        if ev.event_id:
            # Don't re-run handlers (or ask an operator again) for a retried event.
            stored = self._stored(session_id, dispatch_id, ev, render, legacy=True)
            if stored is not None:
                return stored
        session = self._sessions.load(session_id) if ev.event == "Stop" and handlers else None
        continues = session.stop_continues(ev.turn_id) if session is not None else 0
        decision = self._decide(
            session_id, ev, dispatch_id, handlers, policy, continues, received, verdict
        )
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
                if can_hold:
                    return gated
                gated = still_pending(decision, gated.approval)
            decision = gated
        return _Judged(decision, session)

    # --- a call held for an operator --------------------------------------------------

    async def _wait_for_operator(self, pending: PendingApproval, hold: Hold) -> Ingested:
        """Wait until the approval settles, the wait runs out or the caller leaves; then
        record and answer the call."""
        assert self._held is not None
        limit = pending.wait_s
        if hold.until is not None:
            limit = max(0.0, min(limit, hold.until - time.monotonic()))
        gone = hold.gone() if hold.gone is not None else None
        approvals = self.approvals
        ended = await self._held.wait(
            pending.approval_id, limit, partial(approvals.still_pending, pending), gone
        )
        # Nobody waits for the answer any more: recorded as abandoned, never decided.
        settle = approvals.abandoned if ended == GONE else approvals.settled
        decision = await self.offload(partial(settle, pending, self._clock))
        return await self._finish(
            pending.session_id, pending.ev, pending.dispatch_id, decision, pending.actor,
            pending.render, pending.received, None,
        )  # fmt: skip

    # --- the record -------------------------------------------------------------------

    async def _finish(
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

        def build() -> list[DomainEventProtocol[UUID]]:
            # On a loop this runs in the committing thread, not on the loop that serves
            # every request's HTTP: the facts (redaction, digest, JSON) are built there.
            return [
                dispatch_created(
                    session_id, ev, dispatch_id, decision, note, actor, received, carried,
                    self.redacted_tools if self.rules.record_facts else None,
                )
            ]  # fmt: skip

        try:
            if session is not None and decision.outcome == "continue":
                continued = partial(
                    self._append_continued, session_id, ev, dispatch_id, build, session
                )
                position = await self.offload(continued)
            else:
                position = await self._dispatches.append(dispatch_id, build)
        except IntegrityError:
            # A retried eventId: answered with the decision stored the first time.
            stored = await self.offload(partial(self._stored, session_id, dispatch_id, ev, render))
            if stored is not None:
                return stored
            raise
        except Exception:  # noqa: BLE001 - a recording failure never changes the outcome
            log.exception("hook dispatch could not be recorded", extra={"dispatch_id": dispatch_id})
            # Without learned content, which is only ever delivered on the record.
            unrecorded = render(ev.event, decision)[0] if render is not None else None
            if self._export is not None:  # must not raise (ingest/ports.py)
                self._export(session_id, ev, dispatch_id, decision, None, received)
            return Ingested(dispatch_id, decision, unrecorded, None, False)
        self.known.add(session_id)
        if self._export is not None:
            self._export(session_id, ev, dispatch_id, decision, position, received)
        return Ingested(dispatch_id, delivered, answer, position, True)

    def _append_continued(
        self,
        session_id: UUID,
        ev: LifecycleEvent,
        dispatch_id: UUID,
        build: Any,
        session: Session,
    ) -> int:
        """An honoured Stop `continue` is counted on its session in the same transaction
        as the dispatch, so the per-turn cap never waits for a read model."""
        created = build()
        for _ in range(_CONTINUE_RETRIES - 1):
            session.stop_continued(ev.turn_id, dispatch_id)
            try:
                return self._dispatches.record(dispatch_id, [*created, *session.collect_events()])
            except IntegrityError:
                reloaded = self._sessions.load(session_id)
                if self._dispatches.stored(dispatch_id) is not None or reloaded is None:
                    raise
                session = reloaded
        session.stop_continued(ev.turn_id, dispatch_id)
        return self._dispatches.record(dispatch_id, [*created, *session.collect_events()])

    def _stored(
        self,
        session_id: UUID,
        dispatch_id: UUID,
        ev: LifecycleEvent,
        render: Render | None,
        *,
        legacy: bool = False,
    ) -> Ingested | None:
        found = stored_answer(
            self._dispatches, session_id, dispatch_id, ev, render, self._with_learned,
            legacy=legacy,
        )  # fmt: skip
        if found is None:
            return None
        stored_id, decision, answer, head = found
        return Ingested(stored_id, decision, answer, head, True, duplicate=True)

    # --- the parts --------------------------------------------------------------------
    def _with_learned(
        self, session_id: UUID, ev: LifecycleEvent, decision: Decision
    ) -> tuple[Decision, list[dict[str, Any]] | None]:
        return with_learned(self._learned, session_id, ev, decision)

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
        verdict: PolicyVerdict | None = None,
    ) -> Decision:
        if not handlers and verdict is None and (policy is None or ev.event != "PreToolUse"):
            decision = PASS
        else:
            dispatch = Dispatch(
                request=handler_request(session_id, ev, dispatch_id, received, self.redacted_tools),
                policy=policy,
                policy_input=ev.tool_input,
                cwd=_working_directory(ev) if policy is not None else None,
                stop_continues_so_far=continues,
                verdict=verdict,
            )
            decision = run_handlers(dispatch, handlers, self._ask)
        try:
            self._observe(ev.event, decision)
        except Exception:  # noqa: BLE001 - observation never changes a decision
            log.exception("dispatch observer failed")
        return decision


def run_handlers(dispatch: Dispatch, handlers: list[HookHandler], ask: AskHandler) -> Decision:
    """Ask each handler the domain names, in turn, until it has decided."""
    replies: list[HandlerReply] = []
    step = decide(dispatch, handlers, replies)
    while isinstance(step, HandlerCall):
        replies.append(ask(step.handler, step.request))
        step = decide(dispatch, handlers, replies)
    return step


def _working_directory(ev: LifecycleEvent) -> str | None:
    """The `cwd` a runtime reported with the call (Claude Code does), when absolute:
    relative paths in the call are judged from there, not from the clone's root."""
    cwd = ev.cwd
    return cwd if cwd is not None and cwd.startswith("/") else None
