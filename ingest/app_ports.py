"""The ingest service's sessions port over the event-sourced application (the dispatch
log's is the group commit itself: ingest/group_commit.py)."""

from __future__ import annotations

from collections.abc import Callable
from uuid import UUID

from eventsourcing.domain import Aggregate
from eventsourcing.persistence import IntegrityError

from domain.application import Tachograph
from domain.errors import Conflict, NotFound
from domain.session import Session


class AppSessions:
    """Sessions in the log; `visible` answers from a read model first (no log read)."""

    def __init__(self, app: Tachograph, visible: Callable[[UUID], bool]) -> None:
        self.app = app
        self._visible = visible

    def exists(self, session_id: UUID) -> bool:
        if self._visible(session_id):
            return True
        try:
            self.app.get_session(session_id)
        except NotFound:
            return False
        return True

    def require(self, session_id: UUID, *, from_log: bool = False) -> None:
        if from_log or not self._visible(session_id):
            self.app.get_session(session_id)  # falls back to the log; raises NotFound

    def load(self, session_id: UUID) -> Session | None:
        try:
            session: Aggregate = self.app.repository.get(session_id)
        except Exception:  # noqa: BLE001 - AggregateNotFoundError, or the store is down
            return None
        return session if isinstance(session, Session) else None

    def create(
        self, session_id: UUID, workspace: str, agent: str | None, agent_session_id: str | None
    ) -> None:
        try:
            self.app.create_session(
                workspace,
                None,
                "system",
                agent=agent,
                agent_session_id=agent_session_id,
                session_id=session_id,
            )
        except IntegrityError:
            # Another request created it first, unless the id is another aggregate's
            # (a task's, a dispatch's): events are never recorded as that one's session.
            found: Aggregate = self.app.repository.get(session_id)
            if not isinstance(found, Session):
                raise Conflict(
                    f"{session_id} is a {type(found).__name__}, not a session.",
                    sessionId=str(session_id),
                ) from None

    def open(self, workspace: str, title: str | None, actor: str) -> tuple[UUID, int | None]:
        recorded = self.app.create_session(workspace, title, actor)
        return recorded.aggregate_id, recorded.position

    def delete(self, session_id: UUID, actor: str) -> int | None:
        return self.app.delete_session(session_id, actor).position
