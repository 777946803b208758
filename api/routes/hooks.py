"""A session's hook audit, timeline and export (its ingest route is in api/hook_routes.py)."""

from __future__ import annotations

from typing import Annotated, Any, Literal
from uuid import UUID

from fastapi import APIRouter, Query
from fastapi.encoders import jsonable_encoder
from starlette.responses import Response

from api.deps import AppDep, Consistent, RunnerDep, SettingsDep, StoreDep
from api.input_limits import MAX_POSITION, StrictJSONRoute
from domain.errors import NotFound
from domain.strict_json import dumps_readable
from projections.hook_audit import group_by_turn, session_hook_records
from projections.sessions import session_exists
from projections.store import ReadStore
from services.session_export import session_export
from services.session_timeline import timeline_page

router = APIRouter(prefix="/api/sessions", tags=["hooks"], route_class=StrictJSONRoute)


def _require_visible(store: ReadStore, session_id: UUID) -> None:
    if not session_exists(store, str(session_id)):
        raise NotFound(f"Session {session_id} does not exist.")


@router.get("/{session_id}/hooks")
def session_hooks(
    session_id: UUID,
    store: StoreDep,
    _: Consistent,
    groupBy: Literal["turn"] | None = None,
) -> dict[str, Any]:
    """The latest 500 hook audit records of the session, oldest first (or grouped per turn)."""
    _require_visible(store, session_id)
    records = session_hook_records(store, str(session_id))
    # Log order: by position, which recordedAt (GET .../timeline) follows; `at` is when
    # each event was created, a millisecond out of that order under concurrent writers.
    if groupBy == "turn":
        return {"turns": group_by_turn(records), "sortedBy": "position"}
    return {"items": records, "sortedBy": "position"}


@router.get("/{session_id}/timeline")
def session_timeline(
    session_id: UUID,
    app: AppDep,
    store: StoreDep,
    _: Consistent,
    limit: Annotated[int, Query(ge=1, le=200)] = 20,
    before: Annotated[int | None, Query(ge=1, le=MAX_POSITION)] = None,
    source: Literal["readModel", "log"] = "readModel",
) -> dict[str, Any]:
    """The session's turns, newest first (by log position): each with its prompt, its
    tool calls in order (subagents' nested under them), its Stop and any failure.

    `before` is the `next` of the previous page. The read model keeps the latest 2,000
    tool calls per session; `source=log` rebuilds the whole timeline from the log.
    """
    _require_visible(store, session_id)
    items, next_before = timeline_page(
        app,
        store,
        str(session_id),
        limit=limit,
        before=before,
        from_log=source == "log",
    )
    return {"items": items, "next": next_before, "sortedBy": "recordedAt"}


@router.get("/{session_id}/export", response_model=None)
def session_export_ndjson(
    session_id: UUID, app: AppDep, store: StoreDep, runner: RunnerDep, settings: SettingsDep
) -> Response:
    """Every event of the session (its own and its dispatches'), oldest first, as NDJSON:
    each with its log position, chain link, previous link and stored payload."""
    records = session_export(
        app,
        store,
        session_id,
        # The links come from the chain's read model: wait until it holds the last event.
        lambda position: runner.wait_for(position, settings.read_wait_s),
    )
    if not records:
        raise NotFound(f"Session {session_id} has no events.")
    lines = (dumps_readable(r, separators=(",", ":")) + "\n" for r in jsonable_encoder(records))
    return Response("".join(lines), media_type="application/x-ndjson")
