"""Credential commands: issue (the secret is returned once, only its digest recorded) and revoke."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from uuid import UUID

from eventsourcing.persistence import IntegrityError

from domain.api_key import ApiKey, api_key_id
from domain.application import Recorded, Tachograph
from domain.credentials import (
    Binding,
    check_binding,
    check_label,
    check_role,
    new_secret,
    secret_digest,
)
from domain.errors import AlreadyExists, NotFound, RuleViolation

REASON_LIMIT = 500


@dataclass(frozen=True)
class Issued:
    """An issued credential: its one and only plaintext appearance."""

    recorded: Recorded
    label: str
    role: str
    secret: str
    expires_at: datetime | None


def _utcnow() -> datetime:
    return datetime.now(UTC)


class KeyService:
    """Issue and revoke credentials; each is an `ApiKey` aggregate keyed by its label."""

    def __init__(self, app: Tachograph, *, clock: Callable[[], datetime] = _utcnow) -> None:
        self.app = app
        self.clock = clock

    def issue(
        self,
        label: str,
        role: str,
        actor: str,
        *,
        lifetime: timedelta | None = None,
        binding: Binding | None = None,
    ) -> Issued:
        check_label(label)
        binding = check_binding(check_role(role), binding or Binding())
        if binding.session_id is not None:
            self.app.get_session(UUID(binding.session_id))
        if binding.workspace_id is not None:
            self.app.get_workspace(binding.workspace_id)
        expires_at = self.clock() + lifetime if lifetime is not None else None
        secret = new_secret()
        key = ApiKey(
            label=label,
            role=role,
            secret_sha256=secret_digest(secret),
            expires_at=expires_at,
            binding=binding.as_dict(),
            actor=actor,
        )
        try:
            position = self.app.record(key)
        except IntegrityError:
            raise AlreadyExists(
                f"A key labelled {label!r} was issued before; labels are never reused."
            ) from None
        return Issued(Recorded(key.id, position), label, role, secret, expires_at)

    def revoke(self, label: str, actor: str, reason: str | None = None) -> Recorded:
        if reason is not None and len(reason) > REASON_LIMIT:
            raise RuleViolation(f"reason is longer than {REASON_LIMIT} characters.")
        try:
            key = self.app.load(ApiKey, api_key_id(label), "Key")
        except NotFound:
            raise NotFound(f"No key is labelled {label!r}.") from None
        key.revoke(actor, reason)
        return Recorded(key.id, self.app.record(key))
