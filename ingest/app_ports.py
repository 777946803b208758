"""The ingest service's ports over the event-sourced application and the group commit."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from uuid import UUID

from eventsourcing.domain import Aggregate, DomainEventProtocol
from eventsourcing.persistence import IntegrityError

from domain.application import Tachograph
from domain.errors import Conflict, NotFound
from domain.hook_dispatch_record import HookDispatch
from domain.session import Session
from ingest.group_commit import GroupCommitter
from ingest.loop import Ready, running_loop
from ingest.ports import Build


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


class CommittedDispatches:
    """Dispatches appended through the group commit, read back from the log.

    On an event loop an append joins the next batch and the loop is woken once per
    committed batch; in a plain thread the caller commits, leading a batch when no
    commit is in flight (ingest/group_commit.py).
    """

    def __init__(self, app: Tachograph, committer: GroupCommitter) -> None:
        self.app = app
        self.committer = committer

    def record(self, dispatch_id: UUID, events: list[DomainEventProtocol[UUID]]) -> int:
        return self.committer.record_events(dispatch_id, events)

    def append(self, dispatch_id: UUID, build: Build) -> Awaitable[int]:
        loop = running_loop()
        if loop is None:
            return Ready(self.committer.record_events(dispatch_id, build()))
        appended: asyncio.Future[int] = loop.create_future()

        def done(outcome: int | BaseException) -> None:
            # In the loop's thread (delivered once per batch), unless the loop closed.
            if appended.done() or loop.is_closed():
                return  # the request went away (cancelled), or the server stopped
            if isinstance(outcome, BaseException):
                appended.set_exception(outcome)
            else:
                appended.set_result(outcome)

        self.committer.enqueue(dispatch_id, build, done, loop.call_soon_threadsafe)
        return appended

    def stored(self, dispatch_id: UUID) -> HookDispatch | None:
        try:
            stored: Aggregate = self.app.repository.get(dispatch_id)
        except Exception:  # noqa: BLE001 - AggregateNotFoundError, or the store is down
            return None
        return stored if isinstance(stored, HookDispatch) else None

    def head(self) -> int | None:
        return self.app.recorder.max_notification_id()
