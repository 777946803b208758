"""The managed hook configuration (spec §6.1): events, their outcomes, and handlers.

Parsing the `TACHOGRAPH_HOOKS` document (its camelCase keys, the URL rules) is the
edge's: infra/hook_config_parser.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from domain.lifecycle_events import (
    EVENT_OUTCOMES,
    GATE_EVENTS,
    OBSERVATIONAL_EVENTS,
    SUBAGENT_EVENTS,
    TOOL_EVENTS,
)

FailureMode = Literal["open", "closed"]

# The vocabulary (names, outcomes per event, gates) is domain/lifecycle_events.py's.

# Only these events have a subject (tool name, subagent id) a matcher can select on.
MATCHABLE_EVENTS: frozenset[str] = TOOL_EVENTS | SUBAGENT_EVENTS

__all__ = [
    "EVENT_OUTCOMES",
    "GATE_EVENTS",
    "MATCHABLE_EVENTS",
    "OBSERVATIONAL_EVENTS",
    "SUBAGENT_EVENTS",
    "TOOL_EVENTS",
    "FailureMode",
    "HookConfig",
    "HookHandler",
]

DEFAULT_TIMEOUT_MS = 2000
MAX_TIMEOUT_MS = 30000


@dataclass(frozen=True)
class HookHandler:
    """One validated HTTP hook handler."""

    id: str
    event: str
    url: str
    matcher: tuple[str, ...] | None
    timeout_ms: int
    failure_mode: FailureMode
    secret_env: str | None

    def matches(self, match_key: str | None) -> bool:
        """Whether this handler applies to an occurrence with the given subject."""
        if self.matcher is None:
            return True
        return match_key is not None and match_key in self.matcher


@dataclass(frozen=True)
class HookConfig:
    """Handlers per event, in declaration order."""

    handlers: dict[str, tuple[HookHandler, ...]]

    @classmethod
    def empty(cls) -> HookConfig:
        """A configuration without any handler."""
        return cls(handlers={})

    def handlers_for(self, event: str, match_key: str | None) -> list[HookHandler]:
        """Handlers of `event` whose matcher selects `match_key`, in declaration order."""
        return [h for h in self.handlers.get(event, ()) if h.matches(match_key)]

    def secret_env_names(self) -> frozenset[str]:
        """Environment variables the handlers sign with (start-up checks they are set)."""
        return frozenset(
            h.secret_env
            for handlers in self.handlers.values()
            for h in handlers
            if h.secret_env is not None
        )
