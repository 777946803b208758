"""Agent adapters: Claude Code's native HTTP hook and Coder's signed chat webhook."""

from __future__ import annotations

import json
from collections.abc import Callable
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any
from uuid import UUID

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse
from pydantic import ValidationError
from starlette.concurrency import run_in_threadpool

from api.adapters.claude_code import (
    ClaudePayloadError,
    claude_payload_to_ingest,
    decision_to_claude,
)
from api.adapters.coder import (
    CoderAuthError,
    coder_session_key,
    coder_to_ingest,
    decision_to_coder,
    sign_coder_response,
    timeout_answer,
    verify_coder_request,
)
from api.auth import authorize_session_in_loop, bound_session, bound_workspace, request_principal
from api.deps import ServicesDep
from api.errors import ApiError
from api.input_limits import (
    TEXT_CHECKED,
    TextProblem,
    check_json,
    loads_checked,
    plainly_clean,
)
from api.metrics import WEBHOOK_REJECTED
from api.schemas import LifecycleEvent
from bootstrap import Services
from domain.gateway import IngestEvent, IngestResult, ToolPolicy, agent_session_uuid
from domain.workspace import DEFAULT_WORKSPACE
from services.tool_policy import tool_policy_for

router = APIRouter(prefix="/hooks", tags=["agent adapters"])

_FIELD_NAMES = {
    "eventId": "event_id",
    "turnId": "turn_id",
    "agent": "agent",
    "agentSessionId": "agent_session_id",
    "toolName": "tool_name",
    "toolCallId": "tool_call_id",
    "toolInput": "tool_input",
    "toolResponse": "tool_response",
    "prompt": "prompt",
    "lastAssistantMessage": "last_assistant_message",
    "subagentId": "subagent_id",
    "model": "model",
    "detail": "detail",
}


def ingest_event(fields: dict[str, Any], *, text_checked: bool = False) -> IngestEvent:
    """Adapter output (camelCase ingest fields) as the gateway's IngestEvent.

    `text_checked`: the body the fields came from is known to hold no text a store
    refuses (see api.input_limits), so the model need not walk it again.
    """
    kwargs = {_FIELD_NAMES[k]: v for k, v in fields.items() if k in _FIELD_NAMES}
    try:  # the same limits as POST /api/sessions/{id}/events (ids ≤ 256 chars, ...)
        LifecycleEvent.model_validate(
            {"event": fields["event"], **{k: v for k, v in fields.items() if k in _FIELD_NAMES}},
            context={TEXT_CHECKED: True} if text_checked else None,
        )
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ())) or "body"
        raise ApiError(422, "validation_error", f"{where}: {first['msg']}.") from None
    return IngestEvent(event=fields["event"], **kwargs)


def claude_hook_event(raw: bytes, explicit_session: str | None) -> tuple[UUID, IngestEvent]:
    """A Claude Code hook body, and its x-tachograph-session-id, as the session and event.

    Raises ApiError: 400 for a body that is not JSON, 422 for anything else wrong. The
    route and the ingest fast path both read hooks through here.
    """
    try:
        # A glance at the bytes proves most bodies clean; only the others are walked.
        payload = json.loads(raw) if plainly_clean(raw) else loads_checked(raw)
    except TextProblem as exc:
        raise ApiError(422, "validation_error", f"{exc}.") from None
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise ApiError(400, "invalid_json", "The request body is not valid JSON.") from None
    try:
        fields = dict(claude_payload_to_ingest(payload))
    except ClaudePayloadError as exc:
        raise ApiError(422, "invalid_hook_payload", f"{exc}.") from None
    session_id = claude_session_id(explicit_session, fields)
    return session_id, ingest_event(fields, text_checked=True)  # the body is known clean


def hook_header(value: str | None) -> str | None:
    """A header as the Claude route reads it: empty or blank is absent.

    Claude Code sends an empty header when an allowed env var is unset.
    """
    return (value or "").strip() or None


def _header(request: Request, name: str) -> str | None:
    return hook_header(request.headers.get(name))


def _position_headers(result: IngestResult) -> dict[str, str]:
    headers = {}
    if result.position is not None:
        headers["x-tachograph-position"] = str(result.position)
    if not result.recorded:
        headers["x-tachograph-recorded"] = "false"
    return headers


CLAUDE_ROUTE = "/hooks/claude"


@router.post("/claude")
async def claude_hook(request: Request, services: ServicesDep) -> JSONResponse:
    """Claude Code's native HTTP hook: its hook JSON in, its answer format out."""
    raw = await request.body()
    principal = request_principal(request)
    explicit = bound_session(principal, _header(request, "x-tachograph-session-id"))
    session_id, event = claude_hook_event(raw, explicit)
    workspace = (
        bound_workspace(principal, _header(request, "x-tachograph-workspace"), CLAUDE_ROUTE)
        or DEFAULT_WORKSPACE
    )
    await authorize_session_in_loop(principal, session_id, services.session_workspace, CLAUDE_ROUTE)
    result = await run_in_threadpool(
        _claude_dispatch,
        services,
        session_id,
        workspace,
        event,
        principal.actor,
        tool_policy_for(principal),
    )
    answer, _ = decision_to_claude(event.event, result.decision())
    return JSONResponse(answer, headers=_position_headers(result))


def claude_session_id(explicit: str | None, fields: dict[str, Any]) -> UUID:
    """The session of a Claude Code hook: the x-tachograph-session-id header, else its own."""
    if explicit is not None:
        try:
            return UUID(explicit)
        except ValueError:
            raise ApiError(
                422, "validation_error", "x-tachograph-session-id must be a UUID."
            ) from None
    native = fields.get("agentSessionId")
    if not native:
        raise ApiError(
            422,
            "validation_error",
            "session_id is missing: send it in the body or x-tachograph-session-id.",
        )
    return agent_session_uuid(f"{fields['agent']}:{native}")


def _claude_dispatch(
    services: Services,
    session_id: UUID,
    workspace: str,
    event: IngestEvent,
    actor: str,
    policy: ToolPolicy | None,
) -> IngestResult:
    services.gateway.ensure_session(
        session_id, workspace=workspace, agent=event.agent, agent_session_id=event.agent_session_id
    )
    return services.gateway.ingest(
        session_id, event, actor=actor, annotate=claude_note(event), policy=policy
    )


def claude_note(event: IngestEvent) -> Callable[[dict[str, Any]], str | None]:
    """The audit note saying how a decision reached Claude Code, if it had to be degraded."""
    return lambda decision: decision_to_claude(event.event, decision)[1]


@router.post("/coder", response_model=None)
async def coder_hook(request: Request, services: ServicesDep) -> Response:
    """Coder's chat lifecycle webhook: HS256-signed request in, signed answer out."""
    settings = services.settings
    if not settings.coder_hook_secret or not settings.coder_hook_url:
        raise ApiError(404, "not_found", "The Coder webhook is not configured.")
    raw = await request.body()
    try:
        verified = verify_coder_request(
            request.headers.get("authorization"),
            raw,
            secret=settings.coder_hook_secret,
            audience=settings.coder_hook_url,
            issuer=settings.coder_hook_issuer,
        )
    except CoderAuthError as exc:
        WEBHOOK_REJECTED.labels(reason=exc.reason).inc()
        raise ApiError(401, "unauthorized", "The webhook signature did not verify.") from None
    try:
        check_json({"meta": verified.meta, "data": verified.data})
    except TextProblem as exc:
        raise ApiError(422, "validation_error", f"{exc}.") from None
    event = ingest_event(dict(coder_to_ingest(verified)))
    session_id = agent_session_uuid(coder_session_key(verified.chat_id))
    future = services.coder_pool.submit(_coder_dispatch, services, session_id, event)
    budget = settings.coder_hook_timeout_ms / 2000
    try:
        result: IngestResult | None = await run_in_threadpool(future.result, budget)
    except FutureTimeout:
        result = None
    answer = (
        decision_to_coder(verified.type, result.decision())
        if result is not None
        else timeout_answer(verified.type)
    )
    body = json.dumps(answer, separators=(",", ":")).encode()
    signature = sign_coder_response(
        body,
        secret=settings.coder_hook_secret,
        jti=verified.dispatch_id,
        type_=verified.type,
        sub=verified.claims["sub"],
        audience=verified.claims["aud"],
    )
    headers = {"Coder-Hook-Signature": signature}
    if result is not None:
        headers.update(_position_headers(result))
    return Response(body, media_type="application/json", headers=headers)


def _coder_dispatch(services: Services, session_id: UUID, event: IngestEvent) -> IngestResult:
    services.gateway.ensure_session(
        session_id,
        workspace=DEFAULT_WORKSPACE,
        agent=event.agent,
        agent_session_id=event.agent_session_id,
    )
    return services.gateway.ingest(session_id, event, actor="coder")
