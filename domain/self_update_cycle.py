"""SelfUpdateCycle: the evidence of one self-update task, phase by phase.

A self-update task's agent works in a contained clone; what it changed reaches the
registered repository only through the fixed order prepare → implement → inspect →
review → commit, each recorded here with its evidence (the captured checkout, the
bounded patch and its digest, the reviewer's verdict, the imported ref). Kept apart
from the `Task` stream so the task board never loads a patch.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

from eventsourcing.application import AggregateNotFoundError
from eventsourcing.domain import event
from eventsourcing.persistence import IntegrityError

from domain.application import Tachograph
from domain.base import TachographAggregate, declare_event_versions
from domain.casing import to_snake
from domain.errors import InvalidState
from domain.ids import stable_id

PHASES = ("prepare", "implement", "inspect", "review", "commit")
# How a phase ended: ok (go on), noop (the cycle ends with nothing to land), failed
# (the cycle ends; the task's error says why), rejected (review said no).
STATUSES = ("ok", "noop", "failed", "rejected")


def cycle_id(task_id: UUID) -> UUID:
    return stable_id("self-update-cycle", str(task_id))


def self_update_ref(task_id: UUID) -> str:
    """Where an accepted commit lands in the registered repository (never a branch)."""
    return f"refs/tachograph/self-update/{task_id}"


class SelfUpdateCycle(TachographAggregate):
    """Phases of every attempt of one self-update task, and the ref it landed, if any."""

    TOPIC = "SelfUpdateCycle"

    @staticmethod
    def create_id(task_id: UUID, **_: Any) -> UUID:
        return cycle_id(task_id)

    @event("Created", topic="SelfUpdateCycle.Created")
    def __init__(self, task_id: UUID, workspace: str) -> None:
        self.task_id = task_id
        self.workspace = workspace
        self.ref: str | None = None
        self.commit: str | None = None
        self.discarded = False
        # The patch waiting for a person's review: {attempt, digest}, and their decision.
        self.awaiting: dict[str, Any] | None = None
        self.decisions: dict[int, dict[str, Any]] = {}

    def record(self, attempt: int, phase: str, status: str, evidence: dict[str, Any]) -> None:
        if phase not in PHASES or status not in STATUSES:
            raise ValueError(f"unknown phase {phase!r} or status {status!r}")
        self._phase_recorded(attempt, phase, status, evidence)

    @event("PhaseRecorded", topic="SelfUpdateCycle.PhaseRecorded")
    def _phase_recorded(
        self, attempt: int, phase: str, status: str, evidence: dict[str, Any]
    ) -> None:
        if phase == "commit" and status == "ok":
            self.ref = evidence["ref"]
            self.commit = evidence["commit"]
            self.discarded = False
        if phase == "inspect" and status == "ok" and evidence.get("review_by") == "operator":
            self.awaiting = {"attempt": attempt, "digest": evidence["digest"]}
        elif phase == "review":
            self.awaiting = None

    def decide(self, digest: str, approve: bool, reason: str | None, actor: str) -> None:
        """A person's verdict on the patch awaiting review; another digest rejects it."""
        if self.awaiting is None or self.awaiting["attempt"] in self.decisions:
            raise InvalidState("Self-update cycle", "not awaiting a review", "reviewed")
        matches = digest == self.awaiting["digest"]
        self._decided(self.awaiting["attempt"], digest, approve and matches, reason, actor)

    @event("ReviewDecided", topic="SelfUpdateCycle.ReviewDecided")
    def _decided(
        self, attempt: int, digest: str, approve: bool, reason: str | None, actor: str
    ) -> None:
        self.decisions[attempt] = {
            "digest": digest,
            "approve": approve,
            "reason": reason,
            "actor": actor,
        }

    def discard(self, actor: str, reason: str | None) -> None:
        if self.ref is None or self.discarded:
            raise InvalidState("Self-update cycle", "without an imported ref", "discarded")
        self._discarded(self.ref, actor, reason)

    @event("Discarded", topic="SelfUpdateCycle.Discarded")
    def _discarded(self, ref: str, actor: str, reason: str | None) -> None:
        self.discarded = True


class CycleRecorder:
    """Appends phases to a task's cycle, creating the cycle with its first phase."""

    def __init__(self, app: Tachograph) -> None:
        self.app = app

    def record(
        self,
        task_id: UUID,
        workspace: str,
        attempt: int,
        phase: str,
        status: str,
        evidence: dict[str, Any],
    ) -> int | None:
        for _ in range(5):  # a concurrent writer of the same cycle: reload and append again
            try:
                cycle: SelfUpdateCycle = self.app.repository.get(cycle_id(task_id))
            except AggregateNotFoundError:
                cycle = SelfUpdateCycle(task_id=task_id, workspace=workspace)
            cycle.record(attempt, phase, status, evidence)
            try:
                position: int | None = self.app.record(cycle)
                return position
            except IntegrityError:
                continue
        raise RuntimeError(f"could not record the {phase} phase of task {task_id}")

    def landed(self, task_id: UUID) -> bool:
        """Whether a commit phase recorded the task's ref (discarded since, or not)."""
        try:
            cycle: SelfUpdateCycle = self.app.repository.get(cycle_id(task_id))
        except AggregateNotFoundError:
            return False
        return cycle.commit is not None

    def decision(self, task_id: UUID, attempt: int) -> dict[str, Any] | None:
        """A person's verdict on this attempt's patch, once given."""
        try:
            cycle: SelfUpdateCycle = self.app.repository.get(cycle_id(task_id))
        except AggregateNotFoundError:
            return None
        return cycle.decisions.get(attempt)

    def decide(
        self, task_id: UUID, digest: str, approve: bool, reason: str | None, actor: str
    ) -> int | None:
        cycle = self.app.load(SelfUpdateCycle, cycle_id(task_id), "Self-update cycle")
        cycle.decide(digest, approve, reason, actor)
        try:
            return self.app.record(cycle)
        except IntegrityError:
            raise InvalidState("Self-update cycle", "reviewed concurrently", "reviewed") from None

    def discard(self, task_id: UUID, actor: str, reason: str | None) -> int | None:
        """Record that the cycle's imported ref was discarded (the caller deletes the ref)."""
        cycle = self.app.load(SelfUpdateCycle, cycle_id(task_id), "Self-update cycle")
        cycle.discard(actor, reason)
        return self.app.record(cycle)


# Version 2 stores evidence keys in snake_case; version 1 (earlier releases) used the
# wire's camelCase (`reviewBy`, `removedRef`, ...). Upcast when read; the log's bytes stay.


def _upcast_phase_v1_v2(state: dict[str, Any]) -> None:
    evidence = state.get("evidence") or {}
    state["evidence"] = {to_snake(k): v for k, v in evidence.items()}


SelfUpdateCycle.PhaseRecorded.upcast_v1_v2 = staticmethod(_upcast_phase_v1_v2)  # type: ignore[attr-defined]


declare_event_versions(SelfUpdateCycle, Created=1, PhaseRecorded=2, ReviewDecided=1, Discarded=1)
