"""The hook routes' one implementation: parse, call HookIngest, render the answer once.

The routes of api/hook_routes.py hand their raw bodies here: `POST
/api/sessions/{id}/events` to `answer_events`, each runtime's hook to `answer_runtime`
(Claude Code's through `answer_claude`). Bad input raises ApiError or
RequestValidationError before anything is recorded.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any
from uuid import UUID

from fastapi.exceptions import RequestValidationError
from pydantic import ValidationError
from starlette.concurrency import run_in_threadpool
from starlette.responses import Response

from api.auth import authorize_session_in_loop, bound_session, bound_workspace
from api.errors import ApiError
from api.hook_caller import caller_gone
from api.input_limits import TEXT_CHECKED, json_body
from api.schemas import LifecycleEventBody
from bootstrap import Services
from domain.casing import to_camel
from domain.lifecycle import InvalidEvent, LifecycleEvent, agent_session_uuid, check_event
from domain.workspace import DEFAULT_WORKSPACE
from infra.logs import bind_log_context
from ingest.runtimes.claude_code import HookPayloadError, with_session_title
from ingest.runtimes.runtimes import CLAUDE, Runtime
from ingest.service import Hold, Ingested
from services.credentials import Principal
from services.tool_policy import tool_policy_for

EVENTS_ROUTE = "/api/sessions/{session_id}/events"
CLAUDE_ROUTE = "/hooks/claude"
_TEXT_CHECKED = {TEXT_CHECKED: True}


# --- answering ---------------------------------------------------------------------

# A hook request's caller can wait for an operator, and leaves when its runtime gives up.
HOLD = Hold(gone=caller_gone)


def json_answer(content: object, ingested: Ingested | None) -> Response:
    """A hook's JSON answer with its position headers (SPEC §6.3).

    The answer goes out once the decision is durable: `x-tachograph-position`, and no
    wait for read models. A decision that could not be recorded still stands, but is
    not acknowledged: `x-tachograph-recorded: false`, so the client may retry.
    """
    body = json.dumps(
        content, ensure_ascii=False, allow_nan=False, indent=None, separators=(",", ":")
    ).encode()
    headers: dict[str, str] = {}
    if ingested is not None:
        if ingested.position is not None:
            headers["x-tachograph-position"] = str(ingested.position)
        if not ingested.recorded:
            headers["x-tachograph-recorded"] = "false"
    return Response(body, media_type="application/json", headers=headers)


def decision_body(ingested: Ingested) -> dict[str, Any]:
    """The generic route's answer (SPEC §6.3): absent optional fields are left out."""
    decision = ingested.decision
    body: dict[str, Any] = {"outcome": decision.outcome}
    if decision.reason is not None:
        body["reason"] = decision.reason
    if decision.additional_context is not None:
        body["additionalContext"] = decision.additional_context
    if decision.replacement is not None:
        body["replacement"] = decision.replacement
    body["dispatchId"] = str(ingested.dispatch_id)
    return body


# --- POST /api/sessions/{id}/events ---------------------------------------------------


def parse_event_body(raw: bytes) -> LifecycleEvent:
    """The generic body as a LifecycleEvent; 400 for bad JSON, 422 naming a bad field."""
    payload = json_body(raw)
    # The strict decoder checked the text and nesting: the model need not walk it again.
    try:
        return LifecycleEventBody.model_validate(payload, context=_TEXT_CHECKED).to_event()
    except ValidationError as exc:
        raise RequestValidationError(exc.errors()) from None


async def answer_events(
    services: Services, principal: Principal, session_id: UUID, raw: bytes
) -> Response:
    """Record a lifecycle event and answer with the combined hook decision."""
    ev = parse_event_body(raw)
    await authorize_session_in_loop(principal, session_id, services, EVENTS_ROUTE)
    bind_log_context(session_id=session_id)
    ingested = await services.ingest.ingest(
        session_id, ev, actor=principal.actor, policy=tool_policy_for(principal), hold=HOLD
    )
    return json_answer(decision_body(ingested), ingested)


# --- POST /hooks/claude -----------------------------------------------------------------


def parse_claude_body(raw: bytes, explicit_session: str | None) -> tuple[UUID, LifecycleEvent]:
    """A Claude Code hook body, and its x-tachograph-session-id, as session and event.

    400 for a body that is not JSON, 422 for anything else wrong.
    """
    parsed = parse_runtime_body(CLAUDE, raw, explicit_session, None)
    assert parsed is not None  # Claude Code's events are all recorded
    return parsed


def parse_runtime_body(
    runtime: Runtime, raw: bytes, explicit_session: str | None, event: str | None
) -> tuple[UUID, LifecycleEvent] | None:
    """A runtime's hook body as session and event; None for an event not recorded at all.

    `event` is the event the hook was registered for, when the route names it. 400 for
    a body that is not JSON, 422 for anything else wrong.
    """
    payload = json_body(raw)
    try:
        ev = runtime.to_event(payload, event)
    except HookPayloadError as exc:
        raise ApiError(422, "invalid_hook_payload", f"{exc}.") from None
    if ev is None:
        return None
    ev = checked(ev)
    return claude_session_id(explicit_session, ev), ev


def checked(ev: LifecycleEvent) -> LifecycleEvent:
    """An adapter's event within SPEC §6.3's limits, else a 422 naming the field as §6.3
    names it."""
    try:
        return check_event(ev)
    except InvalidEvent as exc:
        field = to_camel(exc.field)
        raise ApiError(422, "validation_error", f"{field}: {exc.problem}.") from None


def claude_session_id(explicit: str | None, ev: LifecycleEvent) -> UUID:
    """The session of a Claude Code hook: the x-tachograph-session-id header, else its own."""
    if explicit is not None:
        try:
            return UUID(explicit)
        except ValueError:
            raise ApiError(
                422, "validation_error", "x-tachograph-session-id must be a UUID."
            ) from None
    if not ev.agent_session_id:
        raise ApiError(
            422,
            "validation_error",
            "session_id is missing: send it in the body or x-tachograph-session-id.",
        )
    return agent_session_uuid(f"{ev.agent}:{ev.agent_session_id}")


def hook_header(value: str | None) -> str | None:
    """A header as the Claude route reads it: empty or blank is absent.

    Claude Code sends an empty header when an allowed env var is unset.
    """
    return (value or "").strip() or None


async def answer_claude(
    services: Services,
    principal: Principal,
    header: Callable[[str], str | None],
    raw: bytes,
) -> Response:
    """Claude Code's native HTTP hook (and the command hook's server side, which names
    the event it was registered for in x-tachograph-event)."""
    event = hook_header(header("x-tachograph-event"))
    return await answer_runtime(services, principal, header, raw, CLAUDE, event)


async def answer_runtime(
    services: Services,
    principal: Principal,
    header: Callable[[str], str | None],
    raw: bytes,
    runtime: Runtime,
    event: str | None,
) -> Response:
    """A runtime's hook (native HTTP or relayed by the command hook): its payload in,
    its answer format out, through the one ingest path."""
    route = f"/hooks/{runtime.name}"
    explicit = bound_session(principal, hook_header(header("x-tachograph-session-id")))
    parsed = parse_runtime_body(runtime, raw, explicit, event)
    if parsed is None:
        return json_answer({}, None)  # an event this runtime's adapter does not record
    session_id, ev = parsed
    workspace = (
        bound_workspace(principal, hook_header(header("x-tachograph-workspace")), route)
        or DEFAULT_WORKSPACE
    )
    await authorize_session_in_loop(principal, session_id, services, route)
    bind_log_context(session_id=session_id)
    ingested = await services.ingest.ingest(
        session_id,
        ev,
        actor=principal.actor,
        policy=tool_policy_for(principal),
        render=runtime.render,
        create_in=workspace,
        hold=HOLD,
    )
    answer = ingested.answer
    if runtime is CLAUDE and ev.event == "SessionStart" and isinstance(answer, dict):
        # Only a command hook sees SessionStart; an operator's title is shown in Claude Code.
        title = await run_in_threadpool(services.locked_title, session_id)
        if title:
            answer = with_session_title(answer, title)
    return json_answer(answer, ingested)
