"""AutonomySettings: the singleton autonomy policy; every change is an event with its actor."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from eventsourcing.domain import event

from domain.base import TachographAggregate, declare_event_versions
from domain.errors import RuleViolation
from domain.ids import stable_id

AUTONOMY_SETTINGS_ID = stable_id("autonomy-settings")
# Policy switches, all off by default (SPEC §5): snake_case here, camelCase on the wire.
POLICIES = ("evolution", "skill_creation", "fact_retention", "self_update")


class AutonomySettings(TachographAggregate):
    """Which autonomous behaviours are allowed; one per deployment."""

    TOPIC = "AutonomySettings"

    @staticmethod
    def create_id(**_: Any) -> UUID:
        return AUTONOMY_SETTINGS_ID

    @event("Created", topic="AutonomySettings.Created")
    def __init__(self, actor: str) -> None:
        self.evolution = False
        self.skill_creation = False
        self.fact_retention = False
        self.self_update = False
        self.updated_by = actor

    def policies(self) -> dict[str, bool]:
        """The current switches."""
        return {name: bool(getattr(self, name)) for name in POLICIES}

    def change(self, changes: dict[str, bool], actor: str) -> dict[str, bool]:
        """Apply the switches that differ; returns them (nothing is recorded when none do)."""
        unknown = set(changes) - set(POLICIES)
        if unknown:
            raise RuleViolation(f"Unknown autonomy policies: {sorted(unknown)}.")
        effective = {k: bool(v) for k, v in changes.items() if getattr(self, k) != bool(v)}
        if effective:
            self._changed(effective, actor)
        return effective

    @event("Changed", topic="AutonomySettings.Changed")
    def _changed(self, changes: dict[str, bool], actor: str) -> None:
        for name, value in changes.items():
            setattr(self, name, value)
        self.updated_by = actor


declare_event_versions(AutonomySettings, Created=1, Changed=1)
