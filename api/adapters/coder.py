"""Coder chat lifecycle webhook: verification, ingest mapping and signed answers (§6.6)."""

from __future__ import annotations

import hashlib
import hmac
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

import jwt

from api.adapters.claude_code import DENY_REASON, split_fields
from domain.casing import to_camel
from domain.hook_dispatch import Decision
from domain.lifecycle import LifecycleEvent
from domain.strict_json import SYNTAX, StrictJSONError, strict_loads

AGENT: Final = "coder"
SCHEMA_VERSION: Final = 1
ALGORITHM: Final = "HS256"
SIGNATURE_HEADER: Final = "Coder-Hook-Signature"
# Clock skew allowed on exp/nbf/iat: Coder's tokens live about as long as its 1.5 s dispatch.
LEEWAY_S: Final = 5.0
RESPONSE_TOKEN_TTL_S: Final = 60
MODEL_CONTEXT_MAX_BYTES: Final = 16 * 1024
TIMEOUT_REASON: Final = "Tachograph did not decide in time; please retry."

REQUIRED_CLAIMS: Final = ("exp", "aud", "jti", "sub", "type", "body_sha256")

EVENT_NAMES: Final[Mapping[str, str]] = {
    "session_start": "SessionStart",
    "user_prompt_submit": "UserPromptSubmit",
    "pre_tool_use": "PreToolUse",
    "post_tool_use": "PostToolUse",
    "pre_compact": "PreCompact",
    "post_compact": "PostCompact",
    "stop": "Stop",
}

# The only events whose answer may carry `permission`; a slow one is denied, not passed.
MUTABLE_TYPES: Final = frozenset({"user_prompt_submit", "pre_tool_use"})

_DATA_FIELDS: Final[Mapping[str, tuple[str, type]]] = {
    "prompt": ("prompt", str),
    "tool_use_id": ("tool_call_id", str),
    "tool_name": ("tool_name", str),
    "tool_input": ("tool_input", dict),
    "tool_response": ("tool_response", object),
}

# meta keys carried in `detail`, renamed where Coder's name would mislead (its workspace is
# not a Tachograph workspace). The other known meta keys become LifecycleEvent fields.
_META_DETAIL: Final[Mapping[str, str]] = {
    "owner_id": "ownerId",
    "workspace_id": "coderWorkspaceId",
    "parent_chat_id": "parentChatId",
    "root_chat_id": "rootChatId",
}
_META_FIELDS: Final = frozenset({"dispatch_id", "schema_version", "chat_id", "turn_id"})


class CoderAuthError(Exception):
    """A Coder webhook request failed verification; the route answers 401 and stores nothing.

    `reason` is one of a small fixed set of snake_case codes (safe as a metrics label).
    """

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason
        self.detail = detail


@dataclass(frozen=True, slots=True)
class CoderRequest:
    """A verified Coder webhook request."""

    type: str
    dispatch_id: str
    chat_id: str
    owner_id: str
    data: dict[str, Any]
    meta: dict[str, Any]
    claims: dict[str, Any]
    workspace_id: str | None = None
    turn_id: str | None = None
    parent_chat_id: str | None = None
    root_chat_id: str | None = None


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


def verify_coder_body(claims: dict[str, Any], raw_body: bytes) -> CoderRequest:
    """The request the verified token signs; raise CoderAuthError on any mismatch, or
    StrictJSONError for a signed body that is JSON no route accepts (NaN, too deep)."""
    # The hash binds the token to these exact bytes: check it before parsing anything.
    _check_body_hash(claims, raw_body)
    request = _parse_request(raw_body, claims)
    _check_claims_match_body(claims, request)
    return request


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


def _check_body_hash(claims: Mapping[str, Any], raw_body: bytes) -> None:
    """Require body_sha256 to be the lowercase hex SHA-256 of the raw body."""
    claimed = claims["body_sha256"]
    actual = hashlib.sha256(raw_body).hexdigest()
    if not isinstance(claimed, str) or not hmac.compare_digest(claimed.encode(), actual.encode()):
        raise CoderAuthError("body_hash_mismatch", "body_sha256 does not match the body")


def _parse_request(raw_body: bytes, claims: dict[str, Any]) -> CoderRequest:
    """Parse `{type, meta, data}` into a CoderRequest."""
    try:
        body = strict_loads(raw_body, refuse_nul=True)
    except StrictJSONError as exc:
        if exc.kind != SYNTAX:
            raise  # JSON the API refuses on every route: the route names the problem
        raise CoderAuthError("malformed_body", "the body is not JSON") from exc
    if not isinstance(body, dict):
        raise CoderAuthError("malformed_body", "the body is not a JSON object")
    type_, meta, data = body.get("type"), body.get("meta"), body.get("data", {})
    if not isinstance(type_, str) or not type_:
        raise CoderAuthError("malformed_body", "type must be a non-empty string")
    if not isinstance(meta, dict) or not isinstance(data, dict):
        raise CoderAuthError("malformed_body", "meta and data must be objects")
    schema_version = meta.get("schema_version")
    if isinstance(schema_version, bool) or schema_version != SCHEMA_VERSION:
        raise CoderAuthError(
            "schema_version_mismatch", f"meta.schema_version must be {SCHEMA_VERSION}"
        )
    return CoderRequest(
        type=type_,
        dispatch_id=_required_meta(meta, "dispatch_id"),
        chat_id=_required_meta(meta, "chat_id"),
        owner_id=_required_meta(meta, "owner_id"),
        data=data,
        meta=meta,
        claims=claims,
        workspace_id=_optional_meta(meta, "workspace_id"),
        turn_id=_optional_meta(meta, "turn_id"),
        parent_chat_id=_optional_meta(meta, "parent_chat_id"),
        root_chat_id=_optional_meta(meta, "root_chat_id"),
    )


def _required_meta(meta: Mapping[str, Any], key: str) -> str:
    """Return a required non-empty string of `meta`."""
    value = meta.get(key)
    if not isinstance(value, str) or not value:
        raise CoderAuthError("malformed_body", f"meta.{key} must be a non-empty string")
    return value


def _optional_meta(meta: Mapping[str, Any], key: str) -> str | None:
    """Return an optional string of `meta` (null or absent: None)."""
    value = meta.get(key)
    if value is not None and not isinstance(value, str):
        raise CoderAuthError("malformed_body", f"meta.{key} must be a string")
    return value


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


def coder_subject(chat_id: str) -> str:
    """Return the JWT subject Coder uses for a chat."""
    return f"coder:chat:{chat_id}"


def coder_session_key(chat_id: str) -> str:
    """Return the name whose UUIDv5 is the chat's Tachograph session id."""
    return f"coder:{chat_id}"


def coder_to_event(req: CoderRequest) -> LifecycleEvent:
    """Map a verified Coder request to a LifecycleEvent (unknown types kept as-is)."""
    event = EVENT_NAMES.get(req.type, req.type)
    data = dict(req.data)
    tool_error = data.pop("tool_error", None)
    if req.type == "post_tool_use" and tool_error is not None:
        event = "PostToolUseFailure"
    mapped, detail = split_fields(data, _DATA_FIELDS)
    if isinstance(tool_error, str):
        mapped["error"] = tool_error
    elif tool_error is not None:
        detail["error"] = tool_error
    for key, value in req.meta.items():
        if key not in _META_FIELDS and value is not None:
            detail.setdefault(_META_DETAIL.get(key) or to_camel(key), value)
    return LifecycleEvent(
        event,
        event_id=req.dispatch_id,
        turn_id=req.turn_id or None,
        agent=AGENT,
        agent_session_id=req.chat_id,
        detail=detail,
        **mapped,
    )


def decision_to_coder(coder_type: str, decision: Decision) -> dict[str, Any]:
    """Map a combined decision to Coder's answer; `permission` only on mutable events."""
    answer: dict[str, Any] = {}
    outcome = decision.outcome
    if coder_type in MUTABLE_TYPES and outcome != "pass":
        answer.update(_permission_answer(coder_type, outcome, decision))
    context = decision.additional_context
    if isinstance(context, str) and context:
        answer["model_context"] = _truncate_utf8(context, MODEL_CONTEXT_MAX_BYTES)
    return answer


def _permission_answer(coder_type: str, outcome: object, decision: Decision) -> dict[str, Any]:
    """Build the allow-with-override or deny part of an answer to a mutable event."""
    replacement = decision.replacement
    if outcome == "modify" and coder_type == "user_prompt_submit" and isinstance(replacement, str):
        return {"permission": {"decision": "allow", "input_override": {"prompt": replacement}}}
    if outcome == "modify" and coder_type == "pre_tool_use" and isinstance(replacement, dict):
        return {"permission": {"decision": "allow", "input_override": replacement}}
    # deny, or anything this event cannot carry out as asked: the safe side is deny.
    reason = decision.reason
    reason = reason if isinstance(reason, str) and reason else DENY_REASON
    return {"permission": {"decision": "deny", "reason": reason}, "user_message": reason}


def _truncate_utf8(text: str, max_bytes: int) -> str:
    """Cut text to at most max_bytes of UTF-8 without splitting a character."""
    encoded = text.encode("utf-8")
    if len(encoded) <= max_bytes:
        return text
    return encoded[:max_bytes].decode("utf-8", errors="ignore")


def timeout_answer(coder_type: str) -> dict[str, Any]:
    """Answer for a dispatch not decided within half of Coder's timeout."""
    if coder_type in MUTABLE_TYPES:
        return decision_to_coder(coder_type, Decision("deny", TIMEOUT_REASON))
    return {}


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
