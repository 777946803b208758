"""Session: one conversation of an agent (or a person) in a workspace."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from uuid import UUID, uuid4

from eventsourcing.domain import event

from domain.base import TachographAggregate, declare_event_versions
from domain.errors import NotFound, RevisionConflict
from domain.redaction import redact_json, redact_secrets


class Session(TachographAggregate):
    """A session; its messages are client-owned and saved with optimistic revisions."""

    TOPIC = "Session"

    @staticmethod
    def create_id(session_id: UUID | None = None, **_: Any) -> UUID:
        return session_id or uuid4()

    @event("Created", topic="Session.Created")
    def __init__(
        self,
        workspace: str,
        title: str | None,
        agent: str | None,
        agent_session_id: str | None,
        actor: str,
        session_id: UUID | None = None,
    ) -> None:
        self.workspace = workspace
        self.title = title
        self.title_locked = title is not None
        self.agent = agent
        self.agent_session_id = agent_session_id
        self.archived = False
        self.deleted = False
        self.revision = 0
        self.messages: list[Any] = []
        # Stop `continue`s honoured in the session's latest turn: the per-turn cap of
        # SPEC §6.2 is kept by the write side, so no read model needs to have caught up.
        self.continued_turn: str | None = None
        self.continues_in_turn = 0

    def stop_continues(self, turn_id: str | None) -> int:
        """How many Stop `continue` decisions `turn_id` already got."""
        return self.continues_in_turn if turn_id == self.continued_turn else 0

    def stop_continued(self, turn_id: str | None, dispatch_id: UUID) -> None:
        """Count one honoured Stop `continue` (recorded with the dispatch that decided it)."""
        self._stop_continued(turn_id, dispatch_id)

    @event("StopContinued", topic="Session.StopContinued")
    def _stop_continued(self, turn_id: str | None, dispatch_id: UUID) -> None:
        if turn_id != self.continued_turn:
            self.continued_turn = turn_id
            self.continues_in_turn = 0
        self.continues_in_turn += 1

    def rename(self, title: str, actor: str) -> None:
        """Set the title (redacted, as every stored text) and lock it against hook-derived
        titles."""
        self._guard_live("renamed")
        title = redact_secrets(title)
        if title != self.title or not self.title_locked:
            self._renamed(title, actor)

    @event("Renamed", topic="Session.Renamed")
    def _renamed(self, title: str, actor: str) -> None:
        self.title = title
        self.title_locked = True

    def archive(self, actor: str) -> None:
        """Move the session to the archive (idempotent)."""
        self._guard_live("archived")
        if not self.archived:
            self._archived(actor)

    @event("Archived", topic="Session.Archived")
    def _archived(self, actor: str) -> None:
        self.archived = True

    def restore(self, actor: str) -> None:
        """Bring an archived session back (idempotent)."""
        self._guard_live("restored")
        if self.archived:
            self._restored(actor)

    @event("Restored", topic="Session.Restored")
    def _restored(self, actor: str) -> None:
        self.archived = False

    def save_messages(self, revision: int, messages: list[Any], actor: str) -> None:
        """Replace the message list when the caller saw the current revision."""
        self._guard_live("saved")
        if revision != self.revision:
            raise RevisionConflict(
                f"Revision {revision} is stale; the session is at revision {self.revision}. "
                "Reload it and apply your change again."
            )
        # Stored text like any other: only the strings of a message change.
        self._messages_saved(self.revision + 1, redact_json(messages), actor)

    @event("MessagesSaved", topic="Session.MessagesSaved")
    def _messages_saved(self, revision: int, messages: list[Any], actor: str) -> None:
        self.revision = revision
        self.messages = messages

    def delete(self, actor: str) -> None:
        """Delete the session from every read model; its events stay in the log."""
        self._guard_live("deleted")
        self._deleted(actor)

    @event("Deleted", topic="Session.Deleted")
    def _deleted(self, actor: str) -> None:
        self.deleted = True

    def _guard_live(self, requested: str) -> None:
        if self.deleted:
            # A deleted session is gone for every client: same answer as never existing.
            raise NotFound(f"Session {self.id} was deleted; it cannot be {requested}.")


declare_event_versions(
    Session,
    Created=1,
    StopContinued=1,
    Renamed=1,
    Archived=1,
    Restored=1,
    MessagesSaved=1,
    Deleted=1,
)


@dataclass(frozen=True, slots=True)
class SessionTarget:
    """What the id a write names as its session is in the log: a Session (its
    `workspace`), another aggregate (its `kind`, say Task), or nothing yet (both None)."""

    workspace: str | None = None
    kind: str | None = None
