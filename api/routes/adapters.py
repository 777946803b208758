"""Agent adapters: each runtime's hook route (Claude Code, Codex, Gemini CLI, Copilot CLI)
and Coder's signed chat webhook."""

from __future__ import annotations

import time
from concurrent.futures import TimeoutError as FutureTimeout
from functools import partial
from typing import Annotated, Literal

from fastapi import APIRouter, Path, Request, Response
from starlette.concurrency import run_in_threadpool

from api.auth import request_principal
from api.coder_webhook import verify_coder_body
from api.deps import ServicesDep
from api.errors import ApiError
from api.hook_calls import answer_claude, answer_runtime, checked, json_answer, settled
from api.input_limits import StrictJSONRoute, body_error
from api.metrics import WEBHOOK_REJECTED
from domain.lifecycle import EVENT_NAME_PATTERN, agent_session_uuid
from domain.strict_json import StrictJSONError
from domain.workspace import DEFAULT_WORKSPACE
from infra.coder_jwt import CoderAuthError, sign_coder_response, verify_coder_token
from ingest.runtimes.coder import (
    coder_session_key,
    coder_to_event,
    decision_to_coder,
    timeout_answer,
)
from ingest.runtimes.runtimes import runtime_for
from ingest.service import Ingested

router = APIRouter(prefix="/hooks", tags=["agent adapters"], route_class=StrictJSONRoute)


@router.post("/claude", response_model=None)
async def claude_hook(request: Request, services: ServicesDep) -> Response:
    """Claude Code's native HTTP hook: its hook JSON in, its answer format out."""
    principal = request_principal(request)
    return await answer_claude(services, principal, request.headers.get, await request.body())


@router.post("/coder", response_model=None)
async def coder_hook(request: Request, services: ServicesDep) -> Response:
    """Coder's chat lifecycle webhook: HS256-signed request in, signed answer out."""
    settings = services.settings
    if not settings.coder_hook_secret or not settings.coder_hook_url:
        raise ApiError(404, "not_found", "The Coder webhook is not configured.")
    try:
        # The token is verified from the headers before the body is read.
        claims = verify_coder_token(
            request.headers.get("authorization"),
            secret=settings.coder_hook_secret,
            audience=settings.coder_hook_url,
            issuer=settings.coder_hook_issuer,
        )
        verified = verify_coder_body(claims, await request.body())
    except CoderAuthError as exc:
        WEBHOOK_REJECTED.labels(reason=exc.reason).inc()
        raise ApiError(401, "unauthorized", "The webhook signature did not verify.") from None
    except StrictJSONError as exc:
        raise body_error(exc) from None
    event = checked(coder_to_event(verified))
    session_id = agent_session_uuid(coder_session_key(verified.chat_id))
    budget = settings.coder_hook_timeout_ms / 2000
    dispatch = partial(
        services.ingest.ingest,
        session_id,
        event,
        actor="coder",
        create_in=DEFAULT_WORKSPACE,
        may_hold=services.held is not None,
        budget_s=budget,
    )
    started = time.monotonic()
    future = services.coder_pool.submit(dispatch)
    try:
        result: Ingested | None = await run_in_threadpool(future.result, budget)
    except FutureTimeout:
        result = None
    if result is not None and result.pending is not None:
        # Coder waits far less than a person needs: a call not decided within its budget
        # is denied as still pending, and a retry finds the same approval.
        left = max(0.0, budget - (time.monotonic() - started))
        result = await settled(services.ingest, services.held, result, left)
    answer = (
        decision_to_coder(verified.type, result.decision)
        if result is not None
        else timeout_answer(verified.type)
    )
    response = json_answer(answer, result)
    response.headers["Coder-Hook-Signature"] = sign_coder_response(
        bytes(response.body),
        secret=settings.coder_hook_secret,
        jti=verified.dispatch_id,
        type_=verified.type,
        sub=verified.claims["sub"],
        audience=verified.claims["aud"],
    )
    return response


# Runtimes whose hooks reach Tachograph through the command hook (`tachograph hook
# <runtime>`) or, for Copilot CLI, also natively over HTTP. Declared after /claude and
# /coder, which keep their own routes.
RuntimeName = Literal["codex", "gemini", "copilot"]
EventName = Annotated[str, Path(pattern=EVENT_NAME_PATTERN)]


@router.post("/{runtime}", response_model=None)
async def runtime_hook(runtime: RuntimeName, request: Request, services: ServicesDep) -> Response:
    """A runtime's hook JSON in (the event named by its `hook_event_name`), its own
    answer format out."""
    return await answer_runtime(
        services,
        request_principal(request),
        request.headers.get,
        await request.body(),
        runtime_for(runtime, gemini_model_events=services.settings.gemini_model_events),
        None,
    )


@router.post("/{runtime}/{event}", response_model=None)
async def runtime_event_hook(
    runtime: RuntimeName, event: EventName, request: Request, services: ServicesDep
) -> Response:
    """The same, for a hook registered for one event (Copilot CLI's own payloads do not
    name their event)."""
    return await answer_runtime(
        services,
        request_principal(request),
        request.headers.get,
        await request.body(),
        runtime_for(runtime, gemini_model_events=services.settings.gemini_model_events),
        event,
    )
