"""Signal commands: record with dedupe, operator ignore/retry, and reflection (SPEC §8.1–8.2).

Reflection claims a signal (its own transaction), asks the reflector, then applies the
decision and completes the signal in one transaction: a mutation is all or nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

from eventsourcing.persistence import IntegrityError

from domain.application import Recorded, Tachograph
from domain.autonomy_service import AutonomyService, find, retrying
from domain.errors import RuleViolation
from domain.learned_target import (
    AGENT_ID_PATTERN,
    LearnedTarget,
    UserOwned,
    learned_revision_id,
    learned_target_id,
    overlay_content,
)
from domain.redaction import contains_secret, evidence
from domain.reflection import (
    STRATEGY_POLICY,
    Decision,
    ReflectionFailed,
    Reflector,
    SignalEvidence,
)
from domain.session import Session
from domain.signal import CLAIMED, MAX_ATTEMPTS, SIGNAL_KINDS, Signal, signal_id
from domain.task import Task
from domain.task_policy import Backoff, truncate_utf8
from domain.task_service import utcnow
from domain.workspace import DEFAULT_WORKSPACE

TRACE_ID_LIMIT = 256
FAILURE_CLASS_LIMIT = 64
ERROR_LIMIT_BYTES = 1024
# Learned targets one turn can name as received: delivery composes at most 16 KiB, so
# far fewer in practice; the bound keeps one event small whatever a caller passes.
RECEIVED_LIMIT = 256
SIGNAL_BACKOFF = Backoff(base_s=10.0, cap_s=600.0)
DEFAULT_CLAIM_TTL = timedelta(minutes=5)


@dataclass(frozen=True)
class SignalClaim:
    """A won claim: the attempt and the evidence to reflect on."""

    signal_id: UUID
    attempt: int
    evidence: SignalEvidence


class SignalService:
    """Command side of signals; claims and completions rest on optimistic concurrency."""

    def __init__(
        self,
        app: Tachograph,
        autonomy: AutonomyService,
        *,
        clock: Callable[[], datetime] = utcnow,
        backoff: Backoff = SIGNAL_BACKOFF,
        claim_ttl: timedelta = DEFAULT_CLAIM_TTL,
    ) -> None:
        self.app = app
        self.autonomy = autonomy
        self.clock = clock
        self.backoff = backoff
        self.claim_ttl = claim_ttl

    # Commands from clients

    def record(
        self,
        agent_id: str,
        trace_id: str,
        kind: str,
        goal: str,
        outcome: str | None,
        failure: str | None,
        failure_class: str | None,
        session_id: UUID | None,
        actor: str,
        *,
        turn_id: str | None = None,
        received: Iterable[str] = (),
        workspace_id: str = DEFAULT_WORKSPACE,
        credential: str | None = None,
    ) -> tuple[Recorded, bool]:
        """Store redacted, bounded evidence; a repeat of (agentId, traceId, kind) is a no-op.

        `received` names the learned targets (their ids) the turn had been given;
        `workspace_id` where the evidence arose (what it teaches stays there);
        `credential` the label of the key that reported it (None: Tachograph itself).
        """
        if not AGENT_ID_PATTERN.fullmatch(agent_id):
            raise RuleViolation("agentId must match [A-Za-z0-9][A-Za-z0-9._:-]{0,127}.")
        if not trace_id.strip() or len(trace_id) > TRACE_ID_LIMIT:
            raise RuleViolation("traceId must be 1 to 256 characters.")
        if kind not in SIGNAL_KINDS:
            raise RuleViolation('kind must be "outcome" or "failure".')
        if failure_class is not None and len(failure_class) > FAILURE_CLASS_LIMIT:
            raise RuleViolation("failureClass must be at most 64 characters.")
        if turn_id is not None and not 0 < len(turn_id) <= TRACE_ID_LIMIT:
            raise RuleViolation("turnId must be 1 to 256 characters.")
        targets = sorted(set(received))
        if len(targets) > RECEIVED_LIMIT or any(len(t) > TRACE_ID_LIMIT for t in targets):
            raise RuleViolation(
                f"received must name at most {RECEIVED_LIMIT} targets of at most 256 characters."
            )
        sid = signal_id(agent_id, trace_id, kind)
        if find(self.app, Signal, sid) is not None:
            return Recorded(sid, None), False
        signal = Signal(
            agent_id=agent_id,
            trace_id=trace_id,
            kind=kind,
            goal=evidence(goal) or "",
            outcome=evidence(outcome),
            failure=evidence(failure),
            failure_class=evidence(failure_class),
            session_id=str(session_id) if session_id else None,
            actor=actor,
            turn_id=turn_id,
            received=targets,
            workspace_id=workspace_id,
            credential=credential,
        )
        try:
            return Recorded(sid, self.app.record(signal)), True
        except IntegrityError:
            return Recorded(sid, None), False  # a concurrent duplicate won: the same signal

    def workspace_of(self, session_id: UUID | None, task_id: UUID | None = None) -> str:
        """The workspace a turn's evidence arose in: its task's, else its session's
        (the default workspace when neither is known any more)."""
        if task_id is not None:
            task = find(self.app, Task, task_id)
            if task is not None:
                return str(task.workspace)
        if session_id is not None:
            session = find(self.app, Session, session_id)
            if session is not None:
                return str(session.workspace)
        return DEFAULT_WORKSPACE

    def get(self, sid: UUID) -> Signal:
        """The signal, or NotFound."""
        return self.app.load(Signal, sid, "Signal")

    def ignore(self, sid: UUID, actor: str) -> Recorded:
        """Pending or dead-letter → ignored; otherwise 409."""
        return self._save(sid, lambda s: s.ignore(actor, self.clock()))

    def retry(self, sid: UUID, actor: str) -> Recorded:
        """Dead-letter → pending, restarting from attempt 0; otherwise 409."""
        return self._save(sid, lambda s: s.retry(actor, self.clock()))

    # Commands from the reflection worker

    def claim(self, sid: UUID, worker: str) -> SignalClaim | None:
        """Claim a due signal (or recover an expired claim); None when not claimable or lost."""
        now = self.clock()
        signal = find(self.app, Signal, sid)
        if signal is None or not signal.claimable(now):
            return None
        if signal.status == CLAIMED and signal.attempts >= MAX_ATTEMPTS:
            signal.expire(now)  # the abandoned claim was the last allowed attempt
            attempt = None
        else:
            attempt = signal.claim(worker, now, now + self.claim_ttl)
        try:
            self.app.record(signal)
        except IntegrityError:
            return None  # another worker claimed (or finished) it first
        if attempt is None:
            return None
        return SignalClaim(signal.id, attempt, _evidence(signal))

    def reflect(
        self, claim: SignalClaim, reflector: Reflector, targets: list[dict[str, Any]]
    ) -> str:
        """Ask the reflector and apply its decision; returns the signal's resulting status."""
        policies = self.autonomy.policies()
        if not policies["evolution"]:
            return self._ignore_claimed(claim, "evolution is disabled")
        try:
            decision = reflector.reflect(claim.evidence, targets)
        except ReflectionFailed as exc:
            return self._fail(claim, f"reflector: {exc}")
        except Exception as exc:  # noqa: BLE001 - a reflector bug is a failed attempt, no more
            return self._fail(claim, f"reflector error: {type(exc).__name__}")
        if decision.mutates and not policies[STRATEGY_POLICY[decision.strategy]]:
            return self._ignore_claimed(claim, f"{decision.strategy} is disabled by policy")
        try:
            return self._apply(claim, decision)
        except ReflectionFailed as exc:
            return self._fail(claim, str(exc))
        except IntegrityError:
            return self._fail(claim, "the target or signal changed concurrently")

    # Internals

    def _apply(self, claim: SignalClaim, decision: Decision) -> str:
        signal = self.get(claim.signal_id)
        if not signal.holds(claim.attempt):
            return "lost"
        now = self.clock()
        if not decision.mutates:
            signal.complete(claim.attempt, "none", None, None, now)
            self.app.record(signal)
            return signal.status
        assert decision.key is not None and decision.content is not None
        if contains_secret(decision.content) or contains_secret(decision.key):
            raise ReflectionFailed("the proposal carries a secret; nothing was changed")
        kind, agent_id, key = decision.strategy, signal.agent_id, decision.key
        # What a workspace's evidence teaches is that workspace's own target.
        workspace = claim.evidence.workspace_id
        target = find(self.app, LearnedTarget, learned_target_id(kind, agent_id, key, workspace))
        if target is None:
            target = LearnedTarget(
                kind=kind, agent_id=agent_id, key=key, actor="system", workspace_id=workspace
            )
        if not target.evolution_managed:
            raise ReflectionFailed(f"target {kind}/{agent_id}/{key} is user-owned")
        if kind == "overlay":
            content = overlay_content(target.content, decision.content)
        else:
            content = decision.content
        revision_id = None
        if content != target.content:
            revision_id = learned_revision_id(signal.id)
            try:
                target.revise(revision_id, signal.id, content, "system")
            except UserOwned as exc:
                raise ReflectionFailed(exc.message) from None
        signal.complete(claim.attempt, decision.strategy, target.id, revision_id, now)
        self.app.record(signal, target)
        return signal.status

    def _ignore_claimed(self, claim: SignalClaim, reason: str) -> str:
        def attempt() -> str:
            signal = self.get(claim.signal_id)
            if not signal.holds(claim.attempt):
                return "lost"
            signal.ignore_claimed(claim.attempt, reason, self.clock())
            self.app.record(signal)
            return signal.status

        return retrying(attempt)

    def _fail(self, claim: SignalClaim, error: str) -> str:
        error = truncate_utf8(error, ERROR_LIMIT_BYTES)

        def attempt() -> str:
            signal = self.get(claim.signal_id)
            if not signal.holds(claim.attempt):
                return "lost"
            now = self.clock()
            signal.fail(claim.attempt, error, now + self.backoff.delay(claim.attempt), now)
            self.app.record(signal)
            return signal.status

        return retrying(attempt)

    def _save(self, sid: UUID, change: Callable[[Signal], None]) -> Recorded:
        def attempt() -> Recorded:
            signal = self.get(sid)
            change(signal)
            return Recorded(signal.id, self.app.record(signal))

        return retrying(attempt)


def _evidence(signal: Signal) -> SignalEvidence:
    return SignalEvidence(
        id=str(signal.id),
        agent_id=signal.agent_id,
        trace_id=signal.trace_id,
        kind=signal.kind,
        goal=signal.goal,
        outcome=signal.outcome,
        failure=signal.failure,
        failure_class=signal.failure_class,
        turn_id=signal.turn_id,
        received=tuple(signal.received),
        # A signal of an earlier release named no workspace: it teaches the default one.
        workspace_id=signal.workspace_id or DEFAULT_WORKSPACE,
    )
