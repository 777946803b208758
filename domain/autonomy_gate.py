"""AutonomyGate: the singleton mutex that allows at most one active self-update task."""

from __future__ import annotations

from datetime import datetime
from typing import Any
from uuid import UUID

from eventsourcing.domain import event

from domain.base import TachographAggregate, declare_event_versions
from domain.errors import Conflict
from domain.ids import stable_id

AUTONOMY_GATE_ID = stable_id("autonomy-gate")


class GateHeld(Conflict):
    """Another self-update task holds the gate, or self-update is off."""

    code = "gate_held"


class AutonomyGate(TachographAggregate):
    """Held by the self-update task in flight; optimistic concurrency makes it exclusive.

    It also mirrors the `selfUpdate` policy (changed in the same transaction as the
    settings), so a materialisation racing a disable conflicts instead of slipping through.
    """

    TOPIC = "AutonomyGate"

    @staticmethod
    def create_id(**_: Any) -> UUID:
        return AUTONOMY_GATE_ID

    @event("Created", topic="AutonomyGate.Created")
    def __init__(self, actor: str) -> None:
        self.enabled = False
        self.task_id: str | None = None
        self.workspace: str | None = None
        self.acquired_at: datetime | None = None

    @property
    def held(self) -> bool:
        return self.task_id is not None

    def set_enabled(self, enabled: bool, actor: str) -> None:
        """Follow the selfUpdate policy (a held gate stays held until its task ends)."""
        if enabled != self.enabled:
            self._policy_changed(enabled, actor)

    @event("PolicyChanged", topic="AutonomyGate.PolicyChanged")
    def _policy_changed(self, enabled: bool, actor: str) -> None:
        self.enabled = enabled

    def acquire(self, task_id: UUID, workspace: str, at: datetime) -> None:
        """Take the gate for a self-update task being materialised in the same transaction."""
        if not self.enabled:
            raise GateHeld("Self-update is disabled; no cycle may start.")
        if self.task_id is not None:
            raise GateHeld(f"Self-update task {self.task_id} is still active.")
        self._acquired(str(task_id), workspace, at)

    @event("Acquired", topic="AutonomyGate.Acquired")
    def _acquired(self, task_id: str, workspace: str, at: datetime) -> None:
        self.task_id = task_id
        self.workspace = workspace
        self.acquired_at = at

    def release(self, task_id: UUID, status: str, at: datetime) -> None:
        """Free the gate once its task can no longer become active again."""
        if self.task_id != str(task_id):
            raise Conflict(f"The gate is not held by task {task_id}.")
        self._released(str(task_id), status, at)

    @event("Released", topic="AutonomyGate.Released")
    def _released(self, task_id: str, status: str, at: datetime) -> None:
        self.task_id = None
        self.workspace = None
        self.acquired_at = None


declare_event_versions(AutonomyGate, Created=1, PolicyChanged=1, Acquired=1, Released=1)
