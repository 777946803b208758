"""Every hook route, declared and answered here: what agent runtimes call on every event.

`POST /api/sessions/{id}/events`, `/hooks/claude`, `/hooks/{runtime}`,
`/hooks/{runtime}/{event}` and `/hooks/coder` are plain Starlette routes placed first in
the app's router. On two cores FastAPI's dependency solving and response handling cost
more than the group-committed append itself, and these routes need none of it: each
reads its raw body once (already size-checked and authenticated by the middleware),
maps it to one `LifecycleEvent` with its runtime's adapter (ingest/runtimes/), awaits
`HookIngest.ingest` (ingest/service.py) and renders the one `Decision` it returns in
the runtime's format. Bad input raises ApiError or RequestValidationError before
anything is recorded, and renders through the app's one error registry (api/errors.py),
as on every other route. Coder's signed webhook is answered by api/coder_webhook.py.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from typing import Any, Final
from uuid import UUID

from fastapi import FastAPI
from fastapi.exceptions import RequestValidationError
from pydantic import ValidationError
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Match, Route
from starlette.types import Scope

from api import hook_caller
from api.auth import authorize_session_in_loop, bound_session, bound_workspace, principal_of
from api.coder_webhook import verify_coder_body
from api.deps import Collaborators
from api.errors import ApiError
from api.input_limits import TEXT_CHECKED, body_error, json_body
from api.metrics import WEBHOOK_REJECTED
from api.middleware import BODY
from api.schemas import LifecycleEventBody
from domain.casing import to_camel
from domain.lifecycle import (
    EVENT_NAME_PATTERN,
    InvalidEvent,
    LifecycleEvent,
    agent_session_uuid,
    check_event,
)
from domain.strict_json import StrictJSONError
from domain.workspace import DEFAULT_WORKSPACE
from infra.coder_jwt import CoderAuthError, sign_coder_response, verify_coder_token
from infra.logs import bind_log_context
from infra.settings import Settings
from ingest.runtimes.claude_code import HookPayloadError, with_session_title
from ingest.runtimes.coder import (
    coder_session_key,
    coder_to_event,
    decision_to_coder,
    timeout_answer,
)
from ingest.runtimes.runtimes import CLAUDE, Runtime, runtime_for
from ingest.service import Hold, HookIngest, Ingested
from services.tool_policy import tool_policy_for

# The runtimes served by /hooks/{runtime}; Claude Code and Coder have their own routes.
HOOK_RUNTIMES: Final = ("codex", "gemini", "copilot", "qwen", "droid", "cline", "opencode", "kilo")
EVENTS_ROUTE: Final = "/api/sessions/{session_id}/events"
_EVENT_NAME: Final = re.compile(EVENT_NAME_PATTERN)
_TEXT_CHECKED: Final = {TEXT_CHECKED: True}
# One encoder for every answer: json.dumps with options builds a new one each call.
_ANSWER_JSON: Final = json.JSONEncoder(
    ensure_ascii=False, allow_nan=False, indent=None, separators=(",", ":")
)
# A hook request's caller can wait for an operator, and leaves when its runtime gives up.
HOLD: Final = Hold(gone=hook_caller.caller_gone)


def _invalid(loc: tuple[str, str], kind: str, message: str, value: str) -> RequestValidationError:
    """A path parameter refused as FastAPI would have refused it (same 422 body)."""
    return RequestValidationError([{"type": kind, "loc": loc, "msg": message, "input": value}])


async def _body(request: Request) -> bytes:
    """The raw body, read once (by the body cap, for an authenticated request); from then
    on a held approval can tell when the caller leaves (api/hook_caller.py)."""
    hook_caller.bind(request.receive)
    read: bytes | None = request.scope.get(BODY)
    return read if read is not None else await request.body()


def _collaborators(request: Request) -> Collaborators:
    collaborators: Collaborators = request.app.state.collaborators
    return collaborators


# --- the routes -----------------------------------------------------------------------


async def ingest_event(request: Request) -> Response:
    """Record a lifecycle event from an agent runtime and return the combined hook decision."""
    raw_id: str = request.path_params["session_id"]
    try:
        session_id = UUID(raw_id)
    except ValueError:
        message = "Input should be a valid UUID"
        raise _invalid(("path", "session_id"), "uuid_parsing", message, raw_id) from None
    c = _collaborators(request)
    principal = principal_of(request.scope)
    ev = parse_event_body(await _body(request))
    await authorize_session_in_loop(principal, session_id, c.sessions, EVENTS_ROUTE)
    bind_log_context(session_id=session_id)
    ingested = await c.ingest.ingest(
        session_id, ev, actor=principal.actor, policy=tool_policy_for(principal), hold=HOLD
    )
    return json_answer(decision_body(ingested), ingested)


async def claude_hook(request: Request) -> Response:
    """Claude Code's native HTTP hook: its hook JSON in, its answer format out."""
    # The command hook's server side names the event it was registered for.
    event = _own_headers(request.scope).get("x-tachograph-event")
    return await _answer_runtime(request, CLAUDE, event)


async def coder_hook(request: Request) -> Response:
    """Coder's chat lifecycle webhook: HS256-signed request in, signed answer out."""
    hook_caller.bind(request.receive)
    c = _collaborators(request)
    return await _answer_coder(c.settings, c.ingest, request)


async def runtime_hook(request: Request) -> Response:
    """A runtime's hook JSON in (the event named by its `hook_event_name`), its own
    answer format out."""
    return await _answer_runtime(request, _runtime(request), None)


async def runtime_event_hook(request: Request) -> Response:
    """The same, for a hook registered for one event (Copilot CLI's own payloads do not
    name their event)."""
    runtime = _runtime(request)
    event: str = request.path_params["event"]
    if not _EVENT_NAME.match(event):
        message = f"String should match pattern '{EVENT_NAME_PATTERN}'"
        raise _invalid(("path", "event"), "string_pattern_mismatch", message, event)
    return await _answer_runtime(request, runtime, event)


def _runtime(request: Request) -> Runtime:
    name: str = request.path_params["runtime"]
    if name not in HOOK_RUNTIMES:
        allowed = ", ".join(repr(r) for r in HOOK_RUNTIMES[:-1])
        message = f"Input should be {allowed} or {HOOK_RUNTIMES[-1]!r}"
        raise _invalid(("path", "runtime"), "literal_error", message, name)
    settings = _collaborators(request).settings
    return runtime_for(name, gemini_model_events=settings.gemini_model_events)


async def _answer_runtime(request: Request, runtime: Runtime, event: str | None) -> Response:
    """A runtime's hook (native HTTP or relayed by the command hook): its payload in,
    its answer format out, through the one ingest path."""
    c = _collaborators(request)
    principal = principal_of(request.scope)
    own = _own_headers(request.scope)
    route = f"/hooks/{runtime.name}"
    explicit = bound_session(principal, own.get("x-tachograph-session-id"))
    parsed = parse_runtime_body(runtime, await _body(request), explicit, event)
    if parsed is None:
        return json_answer({}, None)  # an event this runtime's adapter does not record
    session_id, ev = parsed
    trace_parent = own.get("traceparent")
    if trace_parent is not None:  # the decision's exported span joins the runtime's trace
        ev = replace(ev, trace_parent=trace_parent)
    workspace = (
        bound_workspace(principal, own.get("x-tachograph-workspace"), route) or DEFAULT_WORKSPACE
    )
    await authorize_session_in_loop(principal, session_id, c.sessions, route)
    bind_log_context(session_id=session_id)
    ingested = await c.ingest.ingest(
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
        title = await run_in_threadpool(c.app.locked_title, session_id)
        if title:
            answer = with_session_title(answer, title)
    return json_answer(answer, ingested)


# --- Coder ----------------------------------------------------------------------------

# Dispatches still running after their answer went out (kept referenced until done).
_BACKGROUND: set[asyncio.Future[Ingested]] = set()
_SETTLE_GRACE_S = 0.5


async def finish_background_dispatches(timeout_s: float = 30.0) -> None:
    """Let dispatches still running after their answer finish (and record) at shutdown."""
    if _BACKGROUND:
        await asyncio.wait(set(_BACKGROUND), timeout=timeout_s)


async def _answer_coder(settings: Settings, ingest: HookIngest, request: Request) -> Response:
    """Coder's chat lifecycle webhook: HS256-signed request in, signed answer out."""
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
    # Coder waits far less than a person needs: a call not decided within half its
    # timeout is denied as still pending (a retry finds the same approval), and slow
    # handlers are answered with the timeout answer while the dispatch goes on, and is
    # recorded, in the background.
    dispatch = asyncio.ensure_future(
        ingest.ingest(
            session_id,
            event,
            actor="coder",
            create_in=DEFAULT_WORKSPACE,
            hold=Hold(until=time.monotonic() + budget),
            budget_s=budget,
        )
    )
    _BACKGROUND.add(dispatch)
    dispatch.add_done_callback(_BACKGROUND.discard)
    # A hold ends at the budget; the settled answer is then recorded, which takes a moment.
    done, _ = await asyncio.wait({dispatch}, timeout=budget + _SETTLE_GRACE_S)
    result: Ingested | None = dispatch.result() if done else None
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


# --- reading a hook's body ------------------------------------------------------------


def parse_event_body(raw: bytes) -> LifecycleEvent:
    """The generic body as a LifecycleEvent; 400 for bad JSON, 422 naming a bad field."""
    payload = json_body(raw)
    # The strict decoder checked the text and nesting: the model need not walk it again.
    try:
        return LifecycleEventBody.model_validate(payload, context=_TEXT_CHECKED).to_event()
    except ValidationError as exc:
        raise RequestValidationError(exc.errors()) from None


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


def _own_headers(scope: Scope) -> dict[str, str | None]:
    """The request's `x-tachograph-*` headers and the runtime's W3C `traceparent`, read in
    one pass, as `hook_header` reads each (blank is absent; the first of a repeated header
    counts)."""
    own: dict[str, str | None] = {}
    for name, value in scope["headers"]:
        if name.startswith(b"x-tachograph-") or name == b"traceparent":
            own.setdefault(name.decode("latin-1"), hook_header(value.decode("latin-1")))
    return own


def hook_header(value: str | None) -> str | None:
    """A header as the Claude route reads it: empty or blank is absent.

    Claude Code sends an empty header when an allowed env var is unset.
    """
    return (value or "").strip() or None


# --- the answer -----------------------------------------------------------------------


def json_answer(content: object, ingested: Ingested | None) -> Response:
    """A hook's JSON answer with its position headers (SPEC §6.3).

    The answer goes out once the decision is durable: `x-tachograph-position`, and no
    wait for read models. A decision that could not be recorded still stands, but is
    not acknowledged: `x-tachograph-recorded: false`, so the client may retry.
    """
    body = _ANSWER_JSON.encode(content).encode()
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


# --- the table ------------------------------------------------------------------------


@dataclass(frozen=True)
class HookRoute:
    path: str
    endpoint: Callable[[Request], Awaitable[Response]]
    tag: str
    parameters: tuple[dict[str, Any], ...] = ()
    body: dict[str, Any] | None = None  # the documented body, where FastAPI had a model


def _path_parameter(name: str, schema: dict[str, Any]) -> dict[str, Any]:
    title = name.replace("_", " ").title()
    return {"name": name, "in": "path", "required": True, "schema": {"title": title, **schema}}


def _body_schema(model: type[LifecycleEventBody]) -> dict[str, Any]:
    """The model's schema as FastAPI documented it: optional fields without `default: null`."""
    schema = model.model_json_schema()
    for field in schema.get("properties", {}).values():
        if "default" in field and field["default"] is None:
            del field["default"]
    return schema


_RUNTIME = _path_parameter("runtime", {"type": "string", "enum": list(HOOK_RUNTIMES)})
# The hottest first: the router tries routes in order.
HOOK_ROUTES: Final = (
    HookRoute(
        "/api/sessions/{session_id}/events",
        ingest_event,
        "hooks",
        (_path_parameter("session_id", {"type": "string", "format": "uuid"}),),
        _body_schema(LifecycleEventBody),
    ),
    HookRoute("/hooks/claude", claude_hook, "agent adapters"),
    HookRoute("/hooks/coder", coder_hook, "agent adapters"),
    HookRoute("/hooks/{runtime}", runtime_hook, "agent adapters", (_RUNTIME,)),
    HookRoute(
        "/hooks/{runtime}/{event}",
        runtime_event_hook,
        "agent adapters",
        (_RUNTIME, _path_parameter("event", {"type": "string", "pattern": EVENT_NAME_PATTERN})),
    ),
)


class LabelledRoute(Route):
    """A Starlette route that names itself in the scope, as FastAPI's routes do, so the
    access log and metrics label its requests by its template."""

    def matches(self, scope: Scope) -> tuple[Match, Scope]:
        match, child_scope = super().matches(scope)
        if match is not Match.NONE:
            child_scope["route"] = self
        return match, child_scope


def install_hook_routes(app: FastAPI) -> None:
    """Put the hook routes ahead of every FastAPI route."""
    routes = [
        LabelledRoute(r.path, r.endpoint, methods=["POST"], name=r.endpoint.__name__)
        for r in HOOK_ROUTES
    ]
    app.router.routes[:0] = routes
