"""Autonomy commands: policy settings, learned targets and reverts."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import TypeVar
from uuid import UUID

from eventsourcing.application import AggregateNotFoundError
from eventsourcing.domain import Aggregate
from eventsourcing.persistence import IntegrityError

from domain.application import Recorded, Tachograph
from domain.autonomy_gate import AUTONOMY_GATE_ID, AutonomyGate
from domain.autonomy_settings import AUTONOMY_SETTINGS_ID, POLICIES, AutonomySettings
from domain.errors import NotFound
from domain.learned_target import LearnedTarget, check_target_key, learned_target_id
from domain.task_service import utcnow

A = TypeVar("A", bound=Aggregate)
T = TypeVar("T")
_CONFLICT_RETRIES = 5


def find(app: Tachograph, cls: type[A], aggregate_id: UUID) -> A | None:
    """The aggregate, or None when it does not exist (or is of another type)."""
    try:
        found: Aggregate = app.repository.get(aggregate_id)
    except AggregateNotFoundError:
        return None
    return found if isinstance(found, cls) else None


def retrying(command: Callable[[], T]) -> T:
    """Run a load-change-save command again when a concurrent save won the version."""
    for _ in range(_CONFLICT_RETRIES - 1):
        try:
            return command()
        except IntegrityError:
            continue
    return command()


class AutonomyService:
    """Command side of autonomy policy and learned targets."""

    def __init__(self, app: Tachograph, *, clock: Callable[[], datetime] = utcnow) -> None:
        self.app = app
        self.clock = clock

    # Settings

    def policies(self) -> dict[str, bool]:
        """The switches as recorded in the log (all off until first changed)."""
        settings = find(self.app, AutonomySettings, AUTONOMY_SETTINGS_ID)
        return settings.policies() if settings else dict.fromkeys(POLICIES, False)

    def update_settings(self, changes: dict[str, bool], actor: str) -> Recorded:
        """Change policy switches; selfUpdate also moves the gate, in the same transaction."""

        def attempt() -> Recorded:
            settings = find(self.app, AutonomySettings, AUTONOMY_SETTINGS_ID)
            settings = settings or AutonomySettings(actor=actor)
            if not settings.change(changes, actor):
                return Recorded(settings.id, None)  # nothing changed: nothing recorded
            gate = find(self.app, AutonomyGate, AUTONOMY_GATE_ID) or AutonomyGate(actor=actor)
            gate.set_enabled(settings.self_update, actor)
            return Recorded(settings.id, self.app.record(settings, gate))

        return retrying(attempt)

    # Learned targets

    def find_target(
        self, kind: str, agent_id: str, key: str, workspace_id: str | None = None
    ) -> LearnedTarget | None:
        return find(self.app, LearnedTarget, learned_target_id(kind, agent_id, key, workspace_id))

    def edit_target(
        self,
        kind: str,
        agent_id: str,
        key: str,
        content: str,
        actor: str,
        workspace_id: str | None = None,
    ) -> Recorded:
        """A user edit: set the content and make the target user-owned (creating it if new)."""
        check_target_key(kind, agent_id, key)

        def attempt() -> Recorded:
            target = self.find_target(kind, agent_id, key, workspace_id) or LearnedTarget(
                kind=kind, agent_id=agent_id, key=key, actor=actor, workspace_id=workspace_id
            )
            target.edit(content, actor)
            return Recorded(target.id, self.app.record(target))

        return retrying(attempt)

    def hand_back_target(
        self, kind: str, agent_id: str, key: str, actor: str, workspace_id: str | None = None
    ) -> Recorded:
        """Return a user-owned target to evolution, keeping its content."""
        check_target_key(kind, agent_id, key)

        def attempt() -> Recorded:
            target = self.find_target(kind, agent_id, key, workspace_id)
            if target is None:
                raise NotFound(f"Target {kind}/{agent_id}/{key} does not exist.")
            target.hand_back(actor)
            return Recorded(target.id, self.app.record(target))

        return retrying(attempt)

    def promote(
        self,
        target_id: UUID,
        revision_id: UUID,
        everywhere: bool,
        workspace_ids: list[str],
        actor: str,
    ) -> Recorded:
        """An operator delivers a revision beyond the workspace its evidence came from."""
        for slug in workspace_ids:
            self.app.get_workspace(slug)  # NotFound names a workspace that does not exist

        def attempt() -> Recorded:
            target = find(self.app, LearnedTarget, target_id)
            if target is None:
                raise NotFound(f"Revision {revision_id} does not exist.")
            target.promote(revision_id, everywhere, workspace_ids, actor)
            return Recorded(target.id, self.app.record(target))

        return retrying(attempt)

    def revert(self, target_id: UUID, revision_id: UUID, actor: str) -> tuple[Recorded, UUID]:
        """Append the compensation of a revision (409s per SPEC §8.3; racing reverts: one wins).

        A racing revert that loses the version reloads the target and then finds the
        revision already reverted, so every loser gets `already_reverted`.
        """

        def attempt() -> tuple[Recorded, UUID]:
            target = find(self.app, LearnedTarget, target_id)
            if target is None:
                raise NotFound(f"Revision {revision_id} does not exist.")
            compensation = target.revert(revision_id, actor)
            return Recorded(target.id, self.app.record(target)), compensation

        return retrying(attempt)
