"""Session routes."""

from __future__ import annotations

from typing import Annotated, Any
from uuid import UUID

from fastapi import APIRouter, Query, Response

from api.deps import (
    ActorDep,
    AppDep,
    CommitDep,
    Consistent,
    IngestDep,
    RunnerDep,
    SettingsDep,
    StoreDep,
)
from api.errors import ApiError
from api.input_limits import StrictJSONRoute
from api.schemas import SessionCreate, SessionSave, SessionUpdate, Slug
from domain.errors import NotFound, RevisionConflict
from projections.sessions import get_session, list_sessions
from projections.store import ReadStore

router = APIRouter(prefix="/api/sessions", tags=["sessions"], route_class=StrictJSONRoute)


def read_session(store: ReadStore, grace_s: float, session_id: UUID) -> dict[str, Any]:
    row = get_session(store, str(session_id), grace_s)
    if row is None:
        raise NotFound(f"Session {session_id} does not exist.")
    return row


@router.post("", status_code=201)
def create_session(
    body: SessionCreate,
    ingest: IngestDep,
    store: StoreDep,
    settings: SettingsDep,
    actor: ActorDep,
    commit: CommitDep,
) -> dict[str, Any]:
    """Create a session in a workspace; its SessionStart hook is dispatched and recorded."""
    session_id, position, started = ingest.open_session(body.workspaceId, body.title, actor)
    commit(started.position or position)
    return read_session(store, settings.no_signal_grace_s, session_id)


@router.get("")
def sessions(
    store: StoreDep,
    settings: SettingsDep,
    _: Consistent,
    archived: bool = False,
    workspace_id: Annotated[Slug | None, Query(alias="workspaceId")] = None,
    limit: Annotated[int, Query(ge=1, le=200)] = 200,
) -> dict[str, Any]:
    """Session rows without messages, newest first."""
    rows = list_sessions(
        store,
        archived=archived,
        workspace=workspace_id,
        limit=limit,
        grace_s=settings.no_signal_grace_s,
    )
    return {"items": rows}


@router.get("/{session_id}")
def session(
    session_id: UUID, store: StoreDep, settings: SettingsDep, _: Consistent
) -> dict[str, Any]:
    """One session with its messages."""
    return read_session(store, settings.no_signal_grace_s, session_id)


@router.put("/{session_id}")
def save_session(
    session_id: UUID,
    body: SessionSave,
    app: AppDep,
    store: StoreDep,
    runner: RunnerDep,
    settings: SettingsDep,
    actor: ActorDep,
    commit: CommitDep,
) -> dict[str, Any]:
    """Save the client-owned message list at the current revision."""
    try:
        recorded = app.save_session_messages(session_id, body.revision, body.messages, actor)
    except RevisionConflict as exc:
        # Show the winner: wait until the read model holds everything in the log so far.
        runner.wait_for(app.recorder.max_notification_id() or 0, 5.0)
        winner = read_session(store, settings.no_signal_grace_s, session_id)
        raise ApiError(409, exc.code, exc.message, session=winner) from None
    commit(recorded.position)
    return read_session(store, settings.no_signal_grace_s, session_id)


@router.patch("/{session_id}")
def update_session(
    session_id: UUID,
    body: SessionUpdate,
    app: AppDep,
    store: StoreDep,
    settings: SettingsDep,
    actor: ActorDep,
    commit: CommitDep,
) -> dict[str, Any]:
    """Rename (locks the title), archive or restore."""
    recorded = app.update_session(session_id, actor, title=body.title, archived=body.archived)
    commit(recorded.position)
    return read_session(store, settings.no_signal_grace_s, session_id)


@router.delete("/{session_id}", status_code=204)
def delete_session(
    session_id: UUID, ingest: IngestDep, actor: ActorDep, commit: CommitDep, response: Response
) -> Response:
    """Delete the session and its hook audit from every read model."""
    commit(ingest.close_session(session_id, actor))
    response.status_code = 204
    return response
