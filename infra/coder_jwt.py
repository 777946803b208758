"""Coder's webhook JWTs: the bearer token verified (HS256, required claims, audience,
issuer, times) from the header alone, the body hash it carries checked against the raw
bytes, and the answer signed (§6.6), with PyJWT."""

from __future__ import annotations

import hashlib
import hmac
import time
from collections.abc import Mapping
from typing import Any, Final

import jwt

ALGORITHM: Final = "HS256"
SIGNATURE_HEADER: Final = "Coder-Hook-Signature"
# Clock skew allowed on exp/nbf/iat: Coder's tokens live about as long as its 1.5 s dispatch.
LEEWAY_S: Final = 5.0
RESPONSE_TOKEN_TTL_S: Final = 60
REQUIRED_CLAIMS: Final = ("exp", "aud", "jti", "sub", "type", "body_sha256")


class CoderAuthError(Exception):
    """A Coder webhook request failed verification; the route answers 401 and stores nothing.

    `reason` is one of a small fixed set of snake_case codes (safe as a metrics label).
    """

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason
        self.detail = detail


def verify_coder_token(
    authorization: str | None,
    *,
    secret: str | bytes,
    audience: str,
    issuer: str | None,
    now: float | None = None,
) -> dict[str, Any]:
    """The claims of the bearer JWT, verified from the header alone (before any body is
    read); raise CoderAuthError on any failure."""
    claims = _decode_token(_bearer_token(authorization), secret, audience, issuer)
    _check_times(claims, time.time() if now is None else now)
    return claims


def _bearer_token(authorization: str | None) -> str:
    """Return the token of an `Authorization: Bearer <JWT>` header."""
    scheme, _, token = (authorization or "").strip().partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise CoderAuthError("missing_bearer", "expected Authorization: Bearer <JWT>")
    return token.strip()


def _decode_token(
    token: str, secret: str | bytes, audience: str, issuer: str | None
) -> dict[str, Any]:
    """Check signature (HS256 only), required claims, audience and issuer with PyJWT."""
    base = audience.rstrip("/")
    try:
        claims = jwt.decode(
            token,
            secret,
            algorithms=[ALGORITHM],
            # A trailing "/" is ignored on both sides: accept either spelling of the claim.
            audience=[base, base + "/"],
            issuer=issuer or None,
            # Time claims are checked by _check_times against an injectable clock.
            options={
                "require": list(REQUIRED_CLAIMS),
                "verify_exp": False,
                "verify_nbf": False,
                "verify_iat": False,
            },
        )
    except jwt.InvalidAlgorithmError as exc:
        raise CoderAuthError("invalid_algorithm", str(exc)) from exc
    except jwt.InvalidSignatureError as exc:
        raise CoderAuthError("invalid_signature", str(exc)) from exc
    except jwt.MissingRequiredClaimError as exc:
        raise CoderAuthError("missing_claim", exc.claim) from exc
    except jwt.InvalidAudienceError as exc:
        raise CoderAuthError("invalid_audience", str(exc)) from exc
    except jwt.InvalidIssuerError as exc:
        raise CoderAuthError("invalid_issuer", str(exc)) from exc
    except jwt.PyJWTError as exc:
        raise CoderAuthError("invalid_token", str(exc)) from exc
    return claims


def _check_times(claims: Mapping[str, Any], now: float) -> None:
    """Reject an expired token, or one not valid yet (nbf, iat in the future)."""
    if _numeric_claim(claims, "exp") <= now - LEEWAY_S:
        raise CoderAuthError("expired", "the token has expired")
    for name in ("nbf", "iat"):
        if name in claims and _numeric_claim(claims, name) > now + LEEWAY_S:
            raise CoderAuthError("not_yet_valid", f"{name} is in the future")


def _numeric_claim(claims: Mapping[str, Any], name: str) -> float:
    """Return a NumericDate claim."""
    value = claims[name]
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise CoderAuthError("invalid_token", f"{name} must be a number")
    return float(value)


def check_body_hash(claims: Mapping[str, Any], raw_body: bytes) -> None:
    """Require body_sha256 to be the lowercase hex SHA-256 of the raw body."""
    claimed = claims["body_sha256"]
    actual = hashlib.sha256(raw_body).hexdigest()
    if not isinstance(claimed, str) or not hmac.compare_digest(claimed.encode(), actual.encode()):
        raise CoderAuthError("body_hash_mismatch", "body_sha256 does not match the body")


def sign_coder_response(
    response_bytes: bytes,
    *,
    secret: str | bytes,
    jti: str,
    type_: str,
    sub: str,
    audience: str | list[str],
    now: float | None = None,
) -> str:
    """Return the Coder-Hook-Signature JWT binding a response body to its request."""
    issued_at = int(time.time() if now is None else now)
    claims = {
        "jti": jti,
        "type": type_,
        "sub": sub,
        "aud": audience,
        "iat": issued_at,
        "exp": issued_at + RESPONSE_TOKEN_TTL_S,
        "body_sha256": hashlib.sha256(response_bytes).hexdigest(),
    }
    return jwt.encode(claims, secret, algorithm=ALGORITHM)
