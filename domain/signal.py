"""Signal: evidence from one agent turn, waiting for (or done with) reflection."""

from __future__ import annotations

from datetime import datetime
from typing import Any
from uuid import UUID

from eventsourcing.domain import event

from domain.base import TachographAggregate, declare_event_versions
from domain.errors import Conflict, InvalidState
from domain.ids import stable_id

PENDING, CLAIMED, COMPLETED, IGNORED, DEAD_LETTER = (
    "pending",
    "claimed",
    "completed",
    "ignored",
    "dead-letter",
)
SIGNAL_STATES = (PENDING, CLAIMED, COMPLETED, IGNORED, DEAD_LETTER)
SIGNAL_KINDS = ("outcome", "failure")
MAX_ATTEMPTS = 5


def signal_id(agent_id: str, trace_id: str, kind: str) -> UUID:
    """The dedupe key (agentId, traceId, kind) as the aggregate ID."""
    return stable_id("signal", agent_id, trace_id, kind)


class StaleClaim(Conflict):
    """A report about a claim that is no longer the signal's current one."""

    code = "stale_claim"


class Signal(TachographAggregate):
    """pending → claimed → completed | ignored; failures back off, then dead-letter."""

    TOPIC = "Signal"

    @staticmethod
    def create_id(agent_id: str, trace_id: str, kind: str, **_: Any) -> UUID:
        return signal_id(agent_id, trace_id, kind)

    @event("Created", topic="Signal.Created")
    def __init__(
        self,
        agent_id: str,
        trace_id: str,
        kind: str,
        goal: str,
        outcome: str | None,
        failure: str | None,
        failure_class: str | None,
        session_id: str | None,
        actor: str,
        turn_id: str | None = None,
        received: list[str] | None = None,
        workspace_id: str | None = None,
        credential: str | None = None,
    ) -> None:
        self.agent_id = agent_id
        self.trace_id = trace_id
        self.kind = kind
        self.goal = goal
        self.outcome = outcome
        self.failure = failure
        self.failure_class = failure_class
        self.session_id = session_id
        self.turn_id = turn_id
        self.received: list[str] = list(received or ())
        # Where the evidence arose and which credential (its label) reported it: what
        # it teaches stays in that workspace unless an operator promotes it.
        self.workspace_id = workspace_id
        self.credential = credential
        self.status = PENDING
        self.attempts = 0
        self.next_attempt_at: datetime | None = None
        self.claimed_by: str | None = None
        self.claim_expires_at: datetime | None = None
        self.last_error: str | None = None

    # Queries

    def claimable(self, now: datetime) -> bool:
        """Pending and past its backoff, or claimed by a worker whose claim expired."""
        if self.status == PENDING:
            return self.next_attempt_at is None or self.next_attempt_at <= now
        return self.status == CLAIMED and self.claim_expired(now)

    def claim_expired(self, now: datetime) -> bool:
        return self.claim_expires_at is not None and self.claim_expires_at <= now

    def holds(self, attempt: int) -> bool:
        """Whether `attempt` is the claim in force."""
        return self.status == CLAIMED and self.attempts == attempt

    # Commands of the worker

    def claim(self, worker: str, now: datetime, expires_at: datetime) -> int:
        """Start the next attempt (an expired claim counts as a failed attempt)."""
        if not self.claimable(now):
            raise InvalidState("Signal", self.status, CLAIMED)
        if self.attempts >= MAX_ATTEMPTS:
            raise InvalidState("Signal", self.status, CLAIMED)
        recovered = self.status == CLAIMED
        self._claimed(self.attempts + 1, worker, expires_at, now, recovered)
        return self.attempts

    @event("Claimed", topic="Signal.Claimed")
    def _claimed(
        self, attempt: int, worker: str, expires_at: datetime, at: datetime, recovered: bool
    ) -> None:
        self.status = CLAIMED
        self.attempts = attempt
        self.claimed_by = worker
        self.claim_expires_at = expires_at

    def expire(self, now: datetime) -> None:
        """An abandoned claim of the last allowed attempt: dead-letter."""
        if self.status != CLAIMED or not self.claim_expired(now):
            raise InvalidState("Signal", self.status, DEAD_LETTER)
        self._dead_lettered(self.attempts, "the claim expired (worker gone?)", now)

    def complete(
        self,
        attempt: int,
        strategy: str,
        target_id: UUID | None,
        revision_id: UUID | None,
        at: datetime,
    ) -> None:
        """The reflector's decision was applied (or was `none`)."""
        self._guard_claim(attempt, COMPLETED)
        self._completed(
            attempt,
            strategy,
            str(target_id) if target_id else None,
            str(revision_id) if revision_id else None,
            at,
        )

    @event("Completed", topic="Signal.Completed")
    def _completed(
        self,
        attempt: int,
        strategy: str,
        target_id: str | None,
        revision_id: str | None,
        at: datetime,
    ) -> None:
        self.status = COMPLETED
        self.claimed_by = None
        self.claim_expires_at = None
        self.last_error = None

    def fail(self, attempt: int, error: str, next_attempt_at: datetime, at: datetime) -> None:
        """A failed attempt: back off, or dead-letter after the last allowed one."""
        self._guard_claim(attempt, PENDING)
        if attempt >= MAX_ATTEMPTS:
            self._dead_lettered(attempt, error, at)
        else:
            self._retry_scheduled(attempt, error, next_attempt_at, at)

    @event("RetryScheduled", topic="Signal.RetryScheduled")
    def _retry_scheduled(
        self, attempt: int, error: str, next_attempt_at: datetime, at: datetime
    ) -> None:
        self.status = PENDING
        self.next_attempt_at = next_attempt_at
        self.last_error = error
        self.claimed_by = None
        self.claim_expires_at = None

    @event("DeadLettered", topic="Signal.DeadLettered")
    def _dead_lettered(self, attempt: int, error: str, at: datetime) -> None:
        self.status = DEAD_LETTER
        self.last_error = error
        self.next_attempt_at = None
        self.claimed_by = None
        self.claim_expires_at = None

    def ignore_claimed(self, attempt: int, reason: str, at: datetime) -> None:
        """Policy says no: the claimed signal is ignored without any mutation."""
        self._guard_claim(attempt, IGNORED)
        self._ignored(reason, "system", at)

    # Commands of operators

    def ignore(self, actor: str, at: datetime) -> None:
        """An operator drops a pending or dead-lettered signal."""
        if self.status not in (PENDING, DEAD_LETTER):
            raise InvalidState("Signal", self.status, IGNORED)
        self._ignored("ignored by an operator", actor, at)

    @event("Ignored", topic="Signal.Ignored")
    def _ignored(self, reason: str, actor: str, at: datetime) -> None:
        self.status = IGNORED
        self.next_attempt_at = None
        self.claimed_by = None
        self.claim_expires_at = None

    def retry(self, actor: str, at: datetime) -> None:
        """An operator gives a dead-lettered signal a fresh start from attempt 0."""
        if self.status != DEAD_LETTER:
            raise InvalidState("Signal", self.status, PENDING)
        self._retried(actor, at)

    @event("Retried", topic="Signal.Retried")
    def _retried(self, actor: str, at: datetime) -> None:
        self.status = PENDING
        self.attempts = 0
        self.next_attempt_at = None
        self.last_error = None

    def _guard_claim(self, attempt: int, requested: str) -> None:
        if not self.holds(attempt):
            raise StaleClaim(
                f"Signal {self.id} is {self.status} at attempt {self.attempts}; "
                f"attempt {attempt} cannot become {requested}."
            )


def _upcast_created_v1_v2(state: dict[str, Any]) -> None:
    # Version 2 names the turn the evidence came from and the learned targets that turn
    # had received; signals of earlier releases knew neither.
    state["turn_id"] = None
    state["received"] = []


def _upcast_created_v2_v3(state: dict[str, Any]) -> None:
    # Version 3 names the workspace and the submitting credential; earlier signals did
    # not record them (their lessons are taught to the default workspace).
    state["workspace_id"] = None
    state["credential"] = None


Signal.Created.upcast_v1_v2 = staticmethod(_upcast_created_v1_v2)  # type: ignore[attr-defined]
Signal.Created.upcast_v2_v3 = staticmethod(_upcast_created_v2_v3)  # type: ignore[attr-defined]
declare_event_versions(
    Signal,
    Created=3,
    Claimed=1,
    Completed=1,
    RetryScheduled=1,
    DeadLettered=1,
    Ignored=1,
    Retried=1,
)
