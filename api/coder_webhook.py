"""Coder's webhook request verified whole: the token (infra/coder_jwt.py) binds these exact
body bytes, the body is a request of the webhook's schema (ingest/runtimes/coder.py), and
the token's claims name that very dispatch, chat and type."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import Response

from api.errors import ApiError
from api.hook_calls import checked, json_answer
from api.input_limits import body_error
from api.metrics import WEBHOOK_REJECTED
from domain.lifecycle import agent_session_uuid
from domain.strict_json import StrictJSONError
from domain.workspace import DEFAULT_WORKSPACE
from infra.coder_jwt import (
    CoderAuthError,
    check_body_hash,
    sign_coder_response,
    verify_coder_token,
)
from ingest.runtimes.coder import (
    SCHEMA_VERSION,
    CoderPayloadError,
    CoderRequest,
    coder_session_key,
    coder_subject,
    coder_to_event,
    decision_to_coder,
    parse_coder_request,
    timeout_answer,
)
from ingest.service import Hold, Ingested

if TYPE_CHECKING:
    from bootstrap import Services

# Dispatches still running after their answer went out (kept referenced until done).
_BACKGROUND: set[asyncio.Future[Ingested]] = set()
_SETTLE_GRACE_S = 0.5


async def finish_background_dispatches(timeout_s: float = 30.0) -> None:
    """Let dispatches still running after their answer finish (and record) at shutdown."""
    if _BACKGROUND:
        await asyncio.wait(set(_BACKGROUND), timeout=timeout_s)


def verify_coder_request(
    authorization: str | None,
    raw_body: bytes,
    *,
    secret: str | bytes,
    audience: str,
    issuer: str | None,
    now: float | None = None,
) -> CoderRequest:
    """Verify the bearer JWT, then the body it signs; raise CoderAuthError on any failure,
    or StrictJSONError for a signed body that is JSON no route accepts (NaN, too deep)."""
    claims = verify_coder_token(
        authorization, secret=secret, audience=audience, issuer=issuer, now=now
    )
    return verify_coder_body(claims, raw_body)


def verify_coder_body(claims: dict[str, Any], raw_body: bytes) -> CoderRequest:
    """The request the verified token signs; raise CoderAuthError on any mismatch, or
    StrictJSONError for a signed body that is JSON no route accepts (NaN, too deep)."""
    # The hash binds the token to these exact bytes: check it before parsing anything.
    check_body_hash(claims, raw_body)
    try:
        request = parse_coder_request(raw_body, claims)
    except CoderPayloadError as exc:
        raise CoderAuthError(exc.reason, exc.detail) from exc
    _check_claims_match_body(claims, request)
    return request


def _check_claims_match_body(claims: Mapping[str, Any], request: CoderRequest) -> None:
    """Bind the token to this dispatch: jti, type, sub and schema_version."""
    if claims["jti"] != request.dispatch_id:
        raise CoderAuthError("jti_mismatch", "jti does not equal meta.dispatch_id")
    if claims["type"] != request.type:
        raise CoderAuthError("type_mismatch", "the type claim does not equal the body type")
    if claims["sub"] != coder_subject(request.chat_id):
        raise CoderAuthError("sub_mismatch", "sub does not equal coder:chat:<meta.chat_id>")
    claimed = claims.get("schema_version", SCHEMA_VERSION)
    if isinstance(claimed, bool) or claimed != SCHEMA_VERSION:
        raise CoderAuthError("schema_version_mismatch", f"schema_version must be {SCHEMA_VERSION}")


async def answer_coder(services: Services, request: Request) -> Response:
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
    # Coder waits far less than a person needs: a call not decided within half its
    # timeout is denied as still pending (a retry finds the same approval), and slow
    # handlers are answered with the timeout answer while the dispatch goes on, and is
    # recorded, in the background.
    dispatch = asyncio.ensure_future(
        services.ingest.ingest(
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
