"""Each task attempt's own credential: an agent token bound to its session and turn.

The agent never sees an operator's or admin's key. Its token expires when the attempt
must have ended (the timeout plus the kill grace) and is revoked as soon as the attempt
settles, so a process that outlives its attempt, or anything it leaked the token to,
is refused from then on.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import timedelta
from uuid import UUID

from domain.api_key import AlreadyRevoked
from domain.credentials import AGENT, Binding
from domain.errors import NotFound
from domain.key_service import KeyService
from projections.runner import ProjectionRunner

log = logging.getLogger(__name__)
PROJECTION_WAIT_S = 5.0


def attempt_label(task_id: UUID, attempt: int) -> str:
    return f"task-{task_id}-{attempt}"


class AttemptTokens:
    """Issue before the agent starts, revoke once it has been reaped."""

    def __init__(
        self,
        keys: KeyService,
        runner: ProjectionRunner,
        on_change: Callable[[], None] = lambda: None,
    ) -> None:
        self.keys = keys
        self.runner = runner
        self.on_change = on_change  # this process's credential snapshot, refreshed at once

    def issue(
        self,
        task_id: UUID,
        attempt: int,
        session_id: UUID,
        turn_id: str,
        lifetime_s: float,
        extra: Binding | None = None,
    ) -> str:
        """`extra`: a fixed tool policy and the root it confines the agent to, if any."""
        binding = Binding(
            session_id=str(session_id),
            task_id=str(task_id),
            turn_id=turn_id,
            policy=extra.policy if extra is not None else None,
            root=extra.root if extra is not None else None,
        )
        issued = self.keys.issue(
            attempt_label(task_id, attempt),
            AGENT,
            "system",
            lifetime=timedelta(seconds=lifetime_s),
            binding=binding,
        )
        # Every replica authenticates against the read model: the agent's first hook
        # must find its token there, so it starts only once the token is projected.
        if issued.recorded.position is not None:
            self.runner.wait_for(issued.recorded.position, PROJECTION_WAIT_S)
        self.on_change()
        return issued.secret

    def revoke(self, task_id: UUID, attempt: int, reason: str) -> None:
        try:
            recorded = self.keys.revoke(attempt_label(task_id, attempt), "system", reason)
        except (AlreadyRevoked, NotFound):
            return  # settled twice (recovery after a crash), or never issued
        if recorded.position is not None:
            self.runner.wait_for(recorded.position, PROJECTION_WAIT_S)
        self.on_change()
