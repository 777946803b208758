"""Workspace: a registered directory below the workspace root that tasks and sessions run in."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from eventsourcing.domain import event

from domain.base import TachographAggregate, declare_event_versions
from domain.ids import workspace_id

DEFAULT_WORKSPACE = "default"


class Workspace(TachographAggregate):
    """A workspace, keyed by its slug through a deterministic aggregate ID."""

    TOPIC = "Workspace"

    @staticmethod
    def create_id(slug: str, **_: Any) -> UUID:
        return workspace_id(slug)

    @event("Created", topic="Workspace.Created")
    def __init__(self, slug: str, path: str, self_update: bool, actor: str) -> None:
        self.slug = slug
        self.path = path
        self.self_update = self_update
        # Self-update prompts carry no learned content unless the workspace opts in: a
        # lesson drawn from ordinary work could steer a change to Tachograph itself.
        self.learned_in_self_update = False

    def set_self_update(self, enabled: bool, actor: str) -> None:
        """Turn self-update cycles on or off for this workspace."""
        if enabled != self.self_update:
            self._self_update_changed(enabled, actor)

    @event("SelfUpdateChanged", topic="Workspace.SelfUpdateChanged")
    def _self_update_changed(self, self_update: bool, actor: str) -> None:
        self.self_update = self_update

    def set_learned_in_self_update(self, enabled: bool, actor: str) -> None:
        """Let self-update task prompts of this workspace carry learned content, or not."""
        if enabled != self.learned_in_self_update:
            self._learned_in_self_update_changed(enabled, actor)

    @event("LearnedInSelfUpdateChanged", topic="Workspace.LearnedInSelfUpdateChanged")
    def _learned_in_self_update_changed(self, learned_in_self_update: bool, actor: str) -> None:
        self.learned_in_self_update = learned_in_self_update


declare_event_versions(Workspace, Created=1, SelfUpdateChanged=1, LearnedInSelfUpdateChanged=1)
