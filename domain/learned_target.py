"""LearnedTarget: one overlay, skill or fact of an agent; its events are the learned revisions.

A revision never edits in place: a revert appends a compensating revision that restores
the previous content. All revisions of a target are events of this one aggregate, so
optimistic concurrency makes "at most one compensation per revision" hold across processes.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any
from uuid import UUID

from eventsourcing.domain import event

from domain.base import TachographAggregate, declare_event_versions
from domain.errors import Conflict, NotFound, RuleViolation
from domain.ids import stable_id

TARGET_KINDS = ("overlay", "skill", "fact")
KEY_PATTERN = re.compile(r"^[a-z0-9][a-z0-9.-]{0,62}$")
AGENT_ID_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$")
# A reflector proposes at most 4 KiB; an overlay accumulates proposals up to 16 KiB.
PROPOSAL_LIMIT_BYTES = 4 * 1024
OVERLAY_LIMIT_BYTES = 16 * 1024
USER_CONTENT_LIMIT_BYTES = 16 * 1024


def learned_target_id(kind: str, agent_id: str, key: str, workspace_id: str | None = None) -> UUID:
    """The target's ID from its natural key (kind, agentId, key) and, for one learned from
    a workspace's evidence, that workspace (None: a target for every workspace)."""
    if workspace_id is None:
        return stable_id("learned-target", kind, agent_id, key)
    return stable_id("learned-target", kind, agent_id, key, "workspace", workspace_id)


def learned_revision_id(signal_id: UUID) -> UUID:
    """A signal leads to at most one revision."""
    return stable_id("learned-revision", str(signal_id))


def compensation_id(revision_id: UUID) -> UUID:
    """The one compensating revision a revision can ever have."""
    return stable_id("learned-revert", str(revision_id))


def content_digest(content: str | None) -> str | None:
    """`sha256:<hex>` of the UTF-8 content; None for no content."""
    if content is None:
        return None
    return "sha256:" + hashlib.sha256(content.encode("utf-8")).hexdigest()


def check_target_key(kind: str, agent_id: str, key: str) -> None:
    """Reject a natural key the routes or the reflector could not name."""
    if kind not in TARGET_KINDS:
        raise RuleViolation(f"kind must be one of {', '.join(TARGET_KINDS)}.")
    if not AGENT_ID_PATTERN.fullmatch(agent_id):
        raise RuleViolation("agentId must match [A-Za-z0-9][A-Za-z0-9._:-]{0,127}.")
    if not KEY_PATTERN.fullmatch(key):
        raise RuleViolation("key must match [a-z0-9][a-z0-9.-]{0,62}.")


def overlay_content(current: str | None, instruction: str) -> str:
    """Append an instruction; the oldest ones give way so the overlay stays ≤ 16 KiB."""
    entries = [e for e in (current or "").split("\n") if e] + [instruction]
    while len(entries) > 1 and len("\n".join(entries).encode()) > OVERLAY_LIMIT_BYTES:
        entries.pop(0)
    return "\n".join(entries)


class NotLatest(Conflict):
    """A later revision of the target exists."""

    code = "not_latest"


class AlreadyReverted(Conflict):
    """The revision already has its compensation."""

    code = "already_reverted"


class NotRevertible(Conflict):
    """The revision is itself a compensation."""

    code = "not_revertible"


class UserOwned(Conflict):
    """A person edited the target; evolution no longer manages it."""

    code = "user_owned"


class TargetChanged(Conflict):
    """The target's content is no longer what the revision wrote."""

    code = "target_changed"


class NotScoped(Conflict):
    """The target is already delivered to every workspace."""

    code = "not_scoped"


class LearnedTarget(TachographAggregate):
    """Effective content of (kind, agentId, key[, workspace]) and every change that led to it.

    A target learned from a workspace's evidence belongs to that workspace
    (`workspace_id`): its content reaches only that workspace's agents, unless an operator
    promotes a revision of it, which covers exactly that revision's content.
    """

    TOPIC = "LearnedTarget"

    @staticmethod
    def create_id(
        kind: str, agent_id: str, key: str, workspace_id: str | None = None, **_: Any
    ) -> UUID:
        return learned_target_id(kind, agent_id, key, workspace_id)

    @event("Created", topic="LearnedTarget.Created")
    def __init__(
        self, kind: str, agent_id: str, key: str, actor: str, workspace_id: str | None = None
    ) -> None:
        self.kind = kind
        self.agent_id = agent_id
        self.key = key
        self.workspace_id = workspace_id
        # The operator's promotion in force: {revision_id, content_digest, everywhere,
        # workspace_ids}; None while the content stays in its own workspace.
        self.promotion: dict[str, Any] | None = None
        self.content: str | None = None
        self.content_digest: str | None = None
        self.evolution_managed = True
        self.latest_revision_id: str | None = None
        # revision id → what a revert needs: the content before it, its digest, links.
        self.revisions: dict[str, dict[str, Any]] = {}

    # Commands

    def revise(self, revision_id: UUID, signal_id: UUID, content: str, actor: str) -> None:
        """A learned revision from a reflected signal (evolution-managed targets only)."""
        if not self.evolution_managed:
            raise UserOwned(f"Target {self.kind}/{self.agent_id}/{self.key} is user-owned.")
        if str(revision_id) in self.revisions:
            raise Conflict(f"Revision {revision_id} already exists.")
        self._revised(
            str(revision_id),
            str(signal_id),
            content,
            content_digest(content),
            self.content_digest,
            None,
            actor,
        )

    def revert(self, revision_id: UUID, actor: str) -> UUID:
        """Append the compensation of `revision_id`, restoring the content before it."""
        key = str(revision_id)
        revision = self.revisions.get(key)
        if revision is None:
            raise NotFound(f"Revision {revision_id} does not exist.")
        if revision["reverted_by"] is not None:
            raise AlreadyReverted(
                f"Revision {revision_id} was already reverted by {revision['reverted_by']}.",
                revertedByRevisionId=revision["reverted_by"],
            )
        if revision["reverts"] is not None:
            raise NotRevertible(
                f"Revision {revision_id} is a compensation; revisions are never reverted twice "
                "over. Edit the target instead."
            )
        if self.latest_revision_id != key:
            raise NotLatest(
                f"Revision {revision_id} is not the latest of its target; revert "
                f"{self.latest_revision_id} first.",
                latestRevisionId=self.latest_revision_id,
            )
        if not self.evolution_managed:
            raise UserOwned(
                f"Target {self.kind}/{self.agent_id}/{self.key} was edited by a person; "
                "evolution no longer manages it."
            )
        if self.content_digest != revision["content_digest"]:
            raise TargetChanged(
                f"The content of {self.kind}/{self.agent_id}/{self.key} changed after "
                f"revision {revision_id}; nothing was reverted."
            )
        compensation = compensation_id(revision_id)
        previous = revision["previous_content"]
        self._revised(
            str(compensation),
            None,
            previous,
            content_digest(previous),
            self.content_digest,
            key,
            actor,
        )
        return compensation

    @event("Revised", topic="LearnedTarget.Revised")
    def _revised(
        self,
        revision_id: str,
        signal_id: str | None,
        content: str | None,
        content_digest: str | None,
        previous_content_digest: str | None,
        reverts_revision_id: str | None,
        actor: str,
    ) -> None:
        self.revisions[revision_id] = {
            "previous_content": self.content,
            "content_digest": content_digest,
            "reverts": reverts_revision_id,
            "reverted_by": None,
        }
        if reverts_revision_id is not None:
            self.revisions[reverts_revision_id]["reverted_by"] = revision_id
        self.content = content
        self.content_digest = content_digest
        self.latest_revision_id = revision_id

    def edit(self, content: str, actor: str) -> None:
        """A person sets the content: the target becomes user-owned."""
        if len(content.encode()) > USER_CONTENT_LIMIT_BYTES:
            raise RuleViolation("content must be at most 16 KiB.")
        if content != self.content or self.evolution_managed:
            self._user_edited(content, content_digest(content), self.content_digest, actor)

    @event("UserEdited", topic="LearnedTarget.UserEdited")
    def _user_edited(
        self,
        content: str,
        content_digest: str | None,
        previous_content_digest: str | None,
        actor: str,
    ) -> None:
        self.content = content
        self.content_digest = content_digest
        self.evolution_managed = False

    def hand_back(self, actor: str) -> None:
        """A person returns the target to evolution (its content stays as it is)."""
        if not self.evolution_managed:
            self._handed_back(actor)

    @event("HandedBack", topic="LearnedTarget.HandedBack")
    def _handed_back(self, actor: str) -> None:
        self.evolution_managed = True

    def promote(
        self, revision_id: UUID, everywhere: bool, workspace_ids: list[str], actor: str
    ) -> None:
        """An operator delivers this revision's content beyond its workspace: to every
        workspace, or to those named (none: back to its own only). Only the latest
        revision, while the target still holds what it wrote."""
        key = str(revision_id)
        revision = self.revisions.get(key)
        if revision is None:
            raise NotFound(f"Revision {revision_id} does not exist.")
        if self.workspace_id is None:
            raise NotScoped(
                f"Target {self.kind}/{self.agent_id}/{self.key} belongs to no workspace; "
                "it is delivered to every workspace already."
            )
        if self.latest_revision_id != key:
            raise NotLatest(
                f"Revision {revision_id} is not the latest of its target; promote "
                f"{self.latest_revision_id} instead.",
                latestRevisionId=self.latest_revision_id,
            )
        if self.content_digest != revision["content_digest"]:
            raise TargetChanged(
                f"The content of {self.kind}/{self.agent_id}/{self.key} changed after "
                f"revision {revision_id}; nothing was promoted."
            )
        others = sorted({w for w in workspace_ids if w != self.workspace_id})
        self._promoted(key, self.content_digest, everywhere, [] if everywhere else others, actor)

    @event("Promoted", topic="LearnedTarget.Promoted")
    def _promoted(
        self,
        revision_id: str,
        content_digest: str | None,
        everywhere: bool,
        workspace_ids: list[str],
        actor: str,
    ) -> None:
        promoted = everywhere or bool(workspace_ids)
        self.promotion = (
            {
                "revision_id": revision_id,
                "content_digest": content_digest,
                "everywhere": everywhere,
                "workspace_ids": list(workspace_ids),
            }
            if promoted
            else None
        )


def _upcast_created_v1_v2(state: dict[str, Any]) -> None:
    # Version 2 names the workspace whose evidence the target was learned from; targets of
    # earlier releases had none and stay delivered to every workspace, as they were.
    state["workspace_id"] = None


LearnedTarget.Created.upcast_v1_v2 = staticmethod(_upcast_created_v1_v2)  # type: ignore[attr-defined]
declare_event_versions(LearnedTarget, Created=2, Revised=1, UserEdited=1, HandedBack=1, Promoted=1)
