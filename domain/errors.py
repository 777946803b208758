"""Domain error families; the API maps each family to one status code."""

from __future__ import annotations

from typing import Any


class DomainError(Exception):
    """Base of every rule the domain refuses to break."""

    code = "domain_error"

    def __init__(self, message: str, **extra: Any) -> None:
        super().__init__(message)
        self.message = message
        self.extra = extra


class NotFound(DomainError):
    """The named aggregate does not exist (or was deleted)."""

    code = "not_found"


class Conflict(DomainError):
    """The command conflicts with the aggregate's current state."""

    code = "conflict"


class InvalidState(Conflict):
    """An illegal state transition."""

    code = "invalid_state"

    def __init__(self, entity: str, current: str, requested: str) -> None:
        super().__init__(
            f"{entity} is {current}; it cannot become {requested}.",
            currentState=current,
            requestedState=requested,
        )


class RevisionConflict(Conflict):
    """A save named a revision that is no longer the current one."""

    code = "revision_conflict"


class AlreadyExists(Conflict):
    """An aggregate with this natural key exists with different content."""

    code = "already_exists"


class RuleViolation(DomainError):
    """Input that is well-formed but breaks a domain rule."""

    code = "validation_error"
