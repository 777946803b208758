"""Coder's webhook request verified whole: the token (infra/coder_jwt.py) binds these exact
body bytes, the body is a request of the webhook's schema (ingest/runtimes/coder.py), and
the token's claims name that very dispatch, chat and type."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from infra.coder_jwt import (
    CoderAuthError,
    check_body_hash,
    verify_coder_token,
)
from ingest.runtimes.coder import (
    SCHEMA_VERSION,
    CoderPayloadError,
    CoderRequest,
    coder_subject,
    parse_coder_request,
)


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
