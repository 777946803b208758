"""What the ingest service needs from the rest of the system, by name.

The composition root (bootstrap.py) plugs in the implementations: ingest/app_ports.py
over the event store and the group committer, infra/hook_wire.py over the HTTP
transport, the metrics module for the observer.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any, Protocol, TypeVar
from uuid import UUID

from eventsourcing.domain import DomainEventProtocol

from domain.approval import Approval
from domain.hook_config import HookHandler
from domain.hook_dispatch import Decision, HandlerReply, HandlerRequest
from domain.hook_dispatch_record import HookDispatch
from domain.learned_delivery import Composed
from domain.lifecycle import LifecycleEvent
from domain.policy.verdict import PolicyVerdict
from domain.session import Session

T = TypeVar("T")

# Runs a callable in the caller's thread, e.g. an event loop's `call_soon_threadsafe`.
Deliver = Callable[[Callable[[], None]], object]
# Told the outcome of an append: the last log position of its aggregate, or the error.
Done = Callable[[int | BaseException], None]
# Builds the events to append, in the thread that commits them.
Build = Callable[[], list[DomainEventProtocol[UUID]]]
# Asks one managed handler; never raises (a failure is a HandlerFailure reply).
AskHandler = Callable[[HookHandler, HandlerRequest], HandlerReply]
# The current time, for the handler requests' timestamps.
Clock = Callable[[], datetime]
# Told every decision (metrics per event and handler); must not raise.
DispatchObserver = Callable[[str, Decision], None]
# Told each decision once its record settled: its log position, None when it could not
# be recorded (the OpenTelemetry export's queue, infra/decision_export.py). On the hook
# path: it must only enqueue, and must not raise.
DecisionSink = Callable[[UUID, LifecycleEvent, UUID, Decision, int | None, datetime], None]
# An agent's learned content composed within a byte budget for the workspace of a
# session, answered from memory (it is asked on the hook path):
# services/learned_context.py's `LearnedContext.for_session`.
LearnedSource = Callable[[str, int, UUID], Composed]
# A runtime's answer for a decision on one of its events, and an audit note saying how
# the decision had to be degraded to be expressed (None when it was not).
Render = Callable[[str, Decision], tuple[Any, str | None]]


class SessionPort(Protocol):
    """Sessions as hook ingestion sees them."""

    def exists(self, session_id: UUID) -> bool:
        """Whether the session is live (read model first, then the log)."""

    def require(self, session_id: UUID, *, from_log: bool = False) -> None:
        """Raise NotFound unless the session is live (`from_log`: never ask a read model)."""

    def load(self, session_id: UUID) -> Session | None:
        """The session aggregate from the log, None when there is none."""

    def create(
        self, session_id: UUID, workspace: str, agent: str | None, agent_session_id: str | None
    ) -> None:
        """Create an agent's session (a concurrent create of the same id is fine)."""

    def open(self, workspace: str, title: str | None, actor: str) -> tuple[UUID, int | None]:
        """Create a session with a new id; its id and log position."""

    def delete(self, session_id: UUID, actor: str) -> int | None:
        """Delete a live session (NotFound otherwise); its log position."""


class DispatchLog(Protocol):
    """Where dispatches are recorded, durably, and found again."""

    def append(self, dispatch_id: UUID, build: Build) -> Awaitable[int]:
        """Append what `build` returns; the awaitable gives the dispatch's log position
        once it is durable. On an event loop the append is queued (ingest/loop.py) and
        the awaitable resolves in the loop's thread; elsewhere the caller commits and
        the awaitable is ready."""

    def record(self, dispatch_id: UUID, events: list[DomainEventProtocol[UUID]]) -> int:
        """Append atomically, block until durable; the dispatch's log position."""

    def stored(self, dispatch_id: UUID) -> HookDispatch | None:
        """The dispatch recorded under this id, if any (None also when unreachable)."""

    def head(self) -> int | None:
        """The log's latest position."""


class ApprovalLog(Protocol):
    """Approvals as the hook path sees them: requested, looked up, expired."""

    def request(self, approval: Approval) -> Approval:
        """Record a request; the one already stored when it exists (a redelivery)."""

    def load(self, approval_id: UUID) -> Approval | None:
        """The approval from the log, None when there is none."""

    def expire(self, approval_id: UUID, at: datetime) -> Approval:
        """Settle a request past its deadline; one already settled is returned as is."""

    def abandon(self, approval_id: UUID, at: datetime) -> Approval:
        """Settle a request whose caller went away; one already settled is returned as is."""

    def workspace(self, session_id: UUID) -> str | None:
        """The workspace a session lives in (rules may be per workspace)."""

    def allowance(self, session_id: UUID, tool_name: str) -> UUID | None:
        """The approval that allowed this tool for the rest of the session, if any."""

    def reusable(self, session_id: UUID, tool_name: str, summary: str | None) -> UUID | None:
        """A request for the same call still pending or settled a moment ago."""


class PolicyPort(Protocol):
    """The operator's policy rules as the hook path sees them (services/active_policies.py):
    compiled, in memory, judged without a read but for a session's first lookup."""

    def applies(self, event: str) -> bool:
        """Whether any active rule is on this event (every other hook skips policy)."""

    def judge(self, session_id: UUID, ev: LifecycleEvent) -> PolicyVerdict | None:
        """What the active rules say of this call."""

    def longest_hold_s(self) -> int:
        """The longest an active `ask` rule holds a call, in seconds (0: none)."""


class Offload(Protocol):
    """Runs a blocking step of the service where it may block (ingest/loop.py)."""

    def __call__(self, step: Callable[[], T], /) -> Awaitable[T]: ...
