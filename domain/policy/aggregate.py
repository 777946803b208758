"""Policy: one scope's policy documents on the record (global, or one workspace).

Each revision keeps its source, its SHA-256 digest, who recorded it and its mode.
Recording does not make a revision bite: activation does. A rollback is a compensating
event that makes an earlier revision active again, and removal leaves the scope with
no active revision; nothing recorded is ever changed.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any
from uuid import UUID

from eventsourcing.domain import event

from domain.base import TachographAggregate, declare_event_versions
from domain.errors import Conflict, NotFound
from domain.ids import random_id, stable_id

GLOBAL = "*"


def policy_id(workspace_id: str | None) -> UUID:
    """The Policy aggregate of a scope: the global one, or a workspace's."""
    return stable_id("policy", workspace_id if workspace_id is not None else GLOBAL)


def revision_id(policy: UUID, number: int) -> UUID:
    return stable_id("policy-revision", str(policy), str(number))


class Policy(TachographAggregate):
    TOPIC = "Policy"

    @staticmethod
    def create_id(workspace_id: str | None, **_: Any) -> UUID:
        return policy_id(workspace_id)

    @event("Created", topic="Policy.Created")
    def __init__(self, workspace_id: str | None, actor: str) -> None:
        self.workspace_id = workspace_id
        # Revision id (as text) -> its number, in the order recorded.
        self.revisions: dict[str, int] = {}
        self.active_revision: str | None = None

    def record(self, source: str, digest: str, mode: str, actor: str) -> str:
        """Record a validated document as the next revision; its id."""
        number = len(self.revisions) + 1
        revision = str(revision_id(self.id, number))
        self._recorded(revision, number, source, digest, mode, actor)
        return revision

    @event("RevisionRecorded", topic="Policy.RevisionRecorded")
    def _recorded(
        self, revision_id: str, number: int, source: str, digest: str, mode: str, actor: str
    ) -> None:
        self.revisions[revision_id] = number

    def activate(self, revision: str, actor: str) -> bool:
        """Make a recorded revision the one that bites; False when it already is."""
        self._require(revision)
        if self.active_revision == revision:
            return False
        self._activated(revision, self.active_revision, actor)
        return True

    @event("Activated", topic="Policy.Activated")
    def _activated(self, revision_id: str, previous_revision_id: str | None, actor: str) -> None:
        self.active_revision = revision_id

    def roll_back(self, revision: str, actor: str) -> None:
        """Make an earlier revision active again, recorded as a compensating event."""
        self._require(revision)
        if self.active_revision == revision:
            raise Conflict(f"revision {revision} is already the active one", revisionId=revision)
        active = self.active_revision
        if active is not None and self.revisions[revision] > self.revisions[active]:
            raise Conflict(
                f"revision {revision} is newer than the active one: activate it instead",
                revisionId=revision,
            )
        self._rolled_back(revision, active, actor)

    @event("RolledBack", topic="Policy.RolledBack")
    def _rolled_back(self, revision_id: str, previous_revision_id: str | None, actor: str) -> None:
        self.active_revision = revision_id

    def remove(self, actor: str) -> None:
        """Leave the scope with no active revision (its history stays)."""
        if self.active_revision is None:
            raise Conflict("this scope has no active policy to remove")
        self._removed(self.active_revision, actor)

    @event("Removed", topic="Policy.Removed")
    def _removed(self, previous_revision_id: str, actor: str) -> None:
        self.active_revision = None

    def _require(self, revision: str) -> None:
        if revision not in self.revisions:
            raise NotFound(f"no revision {revision} in this scope", revisionId=revision)


declare_event_versions(Policy, Created=1, RevisionRecorded=1, Activated=1, RolledBack=1, Removed=1)


class PolicyBacktest(TachographAggregate):
    """The audit record of one backtest: who tried which document (by digest) against
    which window of the record, and how many calls it judged. A backtest changes nothing
    else; each run is an aggregate of its own, so it never contends with the scope's
    revisions."""

    TOPIC = "PolicyBacktest"

    @staticmethod
    def create_id(**_: Any) -> UUID:
        return random_id()

    @event("Created", topic="PolicyBacktest.Created")
    def __init__(
        self,
        digest: str,
        workspace_id: str | None,
        since: datetime | None,
        until: datetime | None,
        evaluated: int,
        unjudged: int,
        actor: str,
    ) -> None:
        self.digest = digest
        self.workspace_id = workspace_id
        self.since = since
        self.until = until
        self.evaluated = evaluated
        self.unjudged = unjudged


declare_event_versions(PolicyBacktest, Created=1)
