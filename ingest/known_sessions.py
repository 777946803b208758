"""The sessions this process has seen live, so the hot path skips a lookup."""

from __future__ import annotations

from uuid import UUID

# How many live sessions a process remembers without a lookup.
KNOWN_SESSIONS_KEPT = 65_536


class KnownSessions:
    """Bounded, oldest first out: a forgotten session costs one lookup, never an error.

    A session deleted by another replica may still take events here for a while; the
    read models drop them (SPEC §5).
    """

    def __init__(self, kept: int = KNOWN_SESSIONS_KEPT) -> None:
        self.kept = kept
        self._known: dict[UUID, None] = {}

    def __contains__(self, session_id: object) -> bool:
        return session_id in self._known

    def __len__(self) -> int:
        return len(self._known)

    def add(self, session_id: UUID) -> None:
        known = self._known
        if session_id in known:
            return
        if len(known) >= self.kept:
            del known[next(iter(known))]
        known[session_id] = None

    def forget(self, session_id: UUID) -> None:
        self._known.pop(session_id, None)
