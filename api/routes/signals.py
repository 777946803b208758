"""Signal routes: record (deduplicated), list bounded evidence, ignore, retry."""

from __future__ import annotations

import re
from typing import Annotated, Any
from uuid import UUID

from fastapi import APIRouter, Query, Response

from api.auth import SessionTargets, authorize_session
from api.autonomy_schemas import AgentId, SignalCreate, SignalStatus
from api.deps import (
    ActorDep,
    AppDep,
    AutonomyDep,
    CommitDep,
    Consistent,
    PrincipalDep,
    SessionTargetsDep,
    StoreDep,
)
from api.errors import ApiError
from api.input_limits import StrictJSONRoute
from api.metrics import FORBIDDEN
from api.schemas import Slug
from domain.agent_ids import TASKS_AGENT_ID, agent_id_for
from domain.application import Tachograph
from domain.credentials import AGENT
from domain.errors import NotFound, RuleViolation
from domain.session import Session
from domain.workspace import DEFAULT_WORKSPACE
from projections.session_titles import with_session_titles
from projections.signals import get_signal, list_signals
from projections.store import ReadStore
from services.credentials import Principal

router = APIRouter(prefix="/api/autonomy/signals", tags=["autonomy"], route_class=StrictJSONRoute)


def read_signal(store: ReadStore, signal_id: UUID) -> dict[str, Any]:
    row = get_signal(store, str(signal_id))
    if row is None:
        raise NotFound(f"Signal {signal_id} does not exist.")
    return with_session_titles(store, [row])[0]


SIGNALS_ROUTE = "/api/autonomy/signals"


def _refused(principal: Principal, message: str) -> ApiError:
    FORBIDDEN.labels(route=SIGNALS_ROUTE, role=principal.role).inc()
    return ApiError(403, "forbidden", message, requiredRole=principal.role, role=principal.role)


def _agent_of(app: Tachograph, principal: Principal, session_id: UUID) -> str | None:
    """The agent an agent token reports for in its session: a task attempt's is `tasks`,
    a runtime's session its runtime's; None when the session names no runtime."""
    if principal.binding.task_id is not None:
        return TASKS_AGENT_ID
    session: object = app.repository.get(session_id)
    agent = getattr(session, "agent", None)
    return agent_id_for(agent) if isinstance(session, Session) and agent else None


# The trace ids Tachograph gives the signals it derives (projections/turn_signals.py):
# `<sessionId>:<turn>` and `task:<taskId>:<attempt>`. An agent naming another session's
# or task's would take that signal's dedupe key and so silence the real evidence.
_SESSION_TRACE = re.compile(
    r"^([0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}):"
)
_TASK_TRACE = re.compile(r"^task:([^:]*):")


def _foreign_trace(principal: Principal, session_id: UUID, trace_id: str) -> str | None:
    """What another session's or task's trace id names ("session …", "task …"), or None."""
    session = _SESSION_TRACE.match(trace_id)
    if session is not None and UUID(session.group(1)) != session_id:
        return f"session {session.group(1)}"
    task = _TASK_TRACE.match(trace_id)
    if task is not None and task.group(1) != principal.binding.task_id:
        return f"task {task.group(1)}"
    return None


def signal_workspace(
    app: Tachograph,
    targets: SessionTargets,
    principal: Principal,
    body: SignalCreate,
    session_id: UUID | None,
) -> str:
    """The workspace the signal's evidence arose in, after checking that the caller may
    report it: an agent token only about its own session (of its binding) and agent;
    other keys about any session or registered workspace."""
    # A Task's or any other aggregate's id is no session: it has no workspace here.
    workspace = targets.session_target(session_id).workspace if session_id is not None else None
    if principal.role == AGENT:
        own = principal.binding.session_id or f"workspace {principal.binding.workspace_id!r}"
        if session_id is None:
            raise _refused(
                principal,
                f"This agent token is bound to {own}; a signal it submits must name its "
                "session (sessionId).",
            )
        # First what the id names (another workspace's session, a Task, ...), then whether
        # it exists at all: a signal, unlike a hook, never creates its session.
        authorize_session(principal, session_id, targets.session_target, SIGNALS_ROUTE)
        if workspace is None:
            raise _refused(
                principal,
                f"This agent token is bound to {own}; session {session_id} is not one of its "
                "sessions, so it cannot submit signals about it.",
            )
        foreign = _foreign_trace(principal, session_id, body.traceId)
        if foreign is not None:
            raise _refused(
                principal,
                f"This agent token is bound to {own}; traceId {body.traceId!r} names {foreign}, "
                "not its own.",
            )
        agent = _agent_of(app, principal, session_id)
        if agent is not None and body.agentId != agent:
            raise _refused(
                principal,
                f"This agent token reports for agent {agent!r} in session {session_id}; it "
                f"cannot submit signals about agent {body.agentId!r}.",
            )
    elif session_id is not None and workspace is None:
        raise NotFound(f"Session {session_id} does not exist.")
    if workspace is not None:
        if body.workspaceId is not None and body.workspaceId != workspace:
            message = (
                f"Session {session_id} lives in workspace {workspace!r}; a signal about it "
                f"cannot name workspace {body.workspaceId!r}."
            )
            raise (
                _refused(principal, message) if principal.role == AGENT else RuleViolation(message)
            )
        return workspace
    named = body.workspaceId or DEFAULT_WORKSPACE
    app.get_workspace(named)  # NotFound names a workspace that does not exist
    return named


@router.post("", status_code=201)
def record_signal(
    body: SignalCreate,
    app: AppDep,
    targets: SessionTargetsDep,
    autonomy: AutonomyDep,
    store: StoreDep,
    principal: PrincipalDep,
    commit: CommitDep,
    response: Response,
) -> dict[str, Any]:
    """Record evidence of one agent turn; a repeat of (agentId, traceId, kind) answers 200.

    403 when an agent token names another session, workspace or agent than its own.
    """
    bound = principal.binding.session_id
    session_id = body.sessionId or (UUID(bound) if bound is not None else None)
    workspace = signal_workspace(app, targets, principal, body, session_id)
    actor = principal.actor
    recorded, created = autonomy.signals.record(
        body.agentId,
        body.traceId,
        body.kind,
        body.goal,
        body.outcome,
        body.failure,
        body.failureClass,
        session_id,
        actor,
        turn_id=body.turnId,
        workspace_id=workspace,
        credential=principal.label,
    )
    position = recorded.position
    if not created:
        # The original may have been recorded by another process a moment ago: read at the
        # log head so the answer always shows it.
        response.status_code = 200
        position = app.recorder.max_notification_id()
    commit(position)
    return read_signal(store, recorded.aggregate_id)


@router.get("")
def signals(
    store: StoreDep,
    _: Consistent,
    status: SignalStatus | None = None,
    agent_id: Annotated[AgentId | None, Query(alias="agentId")] = None,
    workspace_id: Annotated[Slug | None, Query(alias="workspaceId")] = None,
    limit: Annotated[int, Query(ge=1, le=200)] = 200,
) -> dict[str, Any]:
    """Recent signals with their (redacted, bounded) evidence, newest first."""
    rows = list_signals(
        store, status=status, agent_id=agent_id, workspace_id=workspace_id, limit=limit
    )
    return {"items": with_session_titles(store, rows)}


@router.get("/{signal_id}")
def signal(signal_id: UUID, store: StoreDep, _: Consistent) -> dict[str, Any]:
    """One signal."""
    return read_signal(store, signal_id)


@router.post("/{signal_id}/ignore")
def ignore_signal(
    signal_id: UUID, autonomy: AutonomyDep, store: StoreDep, actor: ActorDep, commit: CommitDep
) -> dict[str, Any]:
    """Pending or dead-letter → ignored; any other state → 409."""
    recorded = autonomy.signals.ignore(signal_id, actor)
    commit(recorded.position)
    return read_signal(store, signal_id)


@router.post("/{signal_id}/retry")
def retry_signal(
    signal_id: UUID, autonomy: AutonomyDep, store: StoreDep, actor: ActorDep, commit: CommitDep
) -> dict[str, Any]:
    """Dead-letter → pending, restarting from attempt 0; any other state → 409."""
    recorded = autonomy.signals.retry(signal_id, actor)
    commit(recorded.position)
    return read_signal(store, signal_id)
