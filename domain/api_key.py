"""ApiKey: one credential's life, from its issue to its revocation. Never its secret."""

from __future__ import annotations

from datetime import datetime
from typing import Any
from uuid import UUID

from eventsourcing.domain import event

from domain.base import TachographAggregate, declare_event_versions
from domain.errors import Conflict
from domain.ids import stable_id


def api_key_id(label: str) -> UUID:
    """Aggregate ID of the credential with this label (labels are unique forever)."""
    return stable_id("api-key", label)


class AlreadyRevoked(Conflict):
    code = "already_revoked"


class ApiKey(TachographAggregate):
    """A credential: label, role, binding, the SHA-256 of its secret, optional expiry."""

    TOPIC = "ApiKey"

    @staticmethod
    def create_id(label: str, **_: Any) -> UUID:
        return api_key_id(label)

    # Named Created for the library (every aggregate's first event is); Issued in the log.
    @event("Created", topic="ApiKey.Issued")
    def __init__(
        self,
        label: str,
        role: str,
        secret_sha256: str,
        expires_at: datetime | None,
        binding: dict[str, str],
        actor: str,
    ) -> None:
        self.label = label
        self.role = role
        self.secret_sha256 = secret_sha256
        self.expires_at = expires_at
        self.binding = binding
        self.issued_by = actor
        self.revoked = False

    def revoke(self, actor: str, reason: str | None) -> None:
        if self.revoked:
            raise AlreadyRevoked(f"Key {self.label!r} is already revoked.")
        self._revoked(actor, reason)

    @event("Revoked", topic="ApiKey.Revoked")
    def _revoked(self, actor: str, reason: str | None) -> None:
        self.revoked = True


declare_event_versions(ApiKey, Created=1, Revoked=1)
