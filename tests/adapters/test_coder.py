"""Coder webhook: every verification failure, the ingest mapping and the answers (§6.6)."""

from __future__ import annotations

import base64
import hashlib
import json
from typing import Any

import jwt
import pytest

from api.coder_webhook import verify_coder_request
from infra.coder_jwt import CoderAuthError, sign_coder_response
from ingest.runtimes.coder import (
    MODEL_CONTEXT_MAX_BYTES,
    TIMEOUT_REASON,
    CoderRequest,
    coder_session_key,
    coder_to_event,
    decision_to_coder,
    timeout_answer,
)
from tests.adapters.event_fields import decision_of, wire_fields

SECRET = "s" * 32
AUDIENCE = "https://tacho.example.com/hooks/coder"
ISSUER = "https://coder.example.com"
NOW = 1_800_000_000.0
CHAT = "5f0c2a4e-2f1b-4b9e-9a57-7f1e3c0d9b11"


def make_body(
    type_: str = "pre_tool_use",
    data: dict[str, Any] | None = None,
    **meta: Any,
) -> bytes:
    body = {
        "type": type_,
        "meta": {
            "dispatch_id": "d-1",
            "schema_version": 1,
            "chat_id": CHAT,
            "owner_id": "u-1",
            **meta,
        },
        "data": {"tool_use_id": "t-1", "tool_name": "bash", "tool_input": {"cmd": "ls"}}
        if data is None
        else data,
    }
    return json.dumps(body).encode()


def make_claims(body: bytes, **overrides: Any) -> dict[str, Any]:
    parsed = json.loads(body)
    claims: dict[str, Any] = {
        "iss": ISSUER,
        "aud": AUDIENCE,
        "sub": f"coder:chat:{parsed['meta']['chat_id']}",
        "jti": parsed["meta"]["dispatch_id"],
        "type": parsed["type"],
        "iat": int(NOW),
        "nbf": int(NOW),
        "exp": int(NOW) + 30,
        "body_sha256": hashlib.sha256(body).hexdigest(),
        "schema_version": 1,
    }
    claims.update(overrides)
    return {k: v for k, v in claims.items() if v is not None}


def bearer(claims: dict[str, Any], *, secret: str = SECRET, algorithm: str = "HS256") -> str:
    return "Bearer " + jwt.encode(claims, secret, algorithm=algorithm)


def verify(
    authorization: str | None,
    body: bytes,
    *,
    audience: str = AUDIENCE,
    issuer: str | None = ISSUER,
    now: float = NOW,
) -> CoderRequest:
    return verify_coder_request(
        authorization, body, secret=SECRET, audience=audience, issuer=issuer, now=now
    )


def expect_rejection(reason: str, authorization: str | None, body: bytes, **kwargs: Any) -> None:
    with pytest.raises(CoderAuthError) as caught:
        verify(authorization, body, **kwargs)
    assert caught.value.reason == reason


def test_valid_request_is_verified() -> None:
    body = make_body(turn_id="turn-9", workspace_id="w-1")

    request = verify(bearer(make_claims(body)), body)

    assert request.type == "pre_tool_use"
    assert request.dispatch_id == "d-1"
    assert request.chat_id == CHAT
    assert request.owner_id == "u-1"
    assert request.turn_id == "turn-9"
    assert request.workspace_id == "w-1"
    assert request.parent_chat_id is None
    assert request.data["tool_name"] == "bash"
    assert request.claims["jti"] == "d-1"


def test_bearer_scheme_is_case_insensitive() -> None:
    body = make_body()
    token = bearer(make_claims(body)).split(" ", 1)[1]

    assert verify(f"bearer {token}", body).dispatch_id == "d-1"


@pytest.mark.parametrize("header", [None, "", "Bearer", "Bearer   ", "Basic abc", "Token x.y.z"])
def test_missing_bearer_is_rejected(header: str | None) -> None:
    expect_rejection("missing_bearer", header, make_body())


def test_bad_signature_is_rejected() -> None:
    body = make_body()

    expect_rejection("invalid_signature", bearer(make_claims(body), secret="x" * 32), body)


def test_alg_none_is_rejected() -> None:
    body = make_body()

    def segment(part: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(part).encode()).rstrip(b"=").decode()

    token = f"{segment({'alg': 'none', 'typ': 'JWT'})}.{segment(make_claims(body))}."

    expect_rejection("invalid_algorithm", f"Bearer {token}", body)


def test_hs512_is_rejected_even_with_the_right_secret() -> None:
    body = make_body()
    long_secret = "s" * 64
    token = jwt.encode(make_claims(body), long_secret, algorithm="HS512")

    with pytest.raises(CoderAuthError) as caught:
        verify_coder_request(
            f"Bearer {token}", body, secret=long_secret, audience=AUDIENCE, issuer=ISSUER, now=NOW
        )
    assert caught.value.reason == "invalid_algorithm"


def test_garbage_token_is_rejected() -> None:
    expect_rejection("invalid_token", "Bearer not-a-jwt", make_body())


def test_wrong_audience_is_rejected() -> None:
    body = make_body()

    expect_rejection(
        "invalid_audience", bearer(make_claims(body, aud="https://evil.example/hooks/coder")), body
    )


@pytest.mark.parametrize(
    ("claimed", "configured"),
    [
        (AUDIENCE + "/", AUDIENCE),
        (AUDIENCE, AUDIENCE + "/"),
        (AUDIENCE + "/", AUDIENCE + "/"),
        ([AUDIENCE + "/", "other"], AUDIENCE),
    ],
)
def test_trailing_slash_of_the_audience_is_ignored(claimed: object, configured: str) -> None:
    body = make_body()

    request = verify(bearer(make_claims(body, aud=claimed)), body, audience=configured)

    assert request.dispatch_id == "d-1"


def test_wrong_issuer_is_rejected() -> None:
    body = make_body()

    expect_rejection("invalid_issuer", bearer(make_claims(body, iss="https://other")), body)


def test_missing_issuer_is_rejected_when_one_is_configured() -> None:
    body = make_body()

    expect_rejection("missing_claim", bearer(make_claims(body, iss=None)), body)


def test_issuer_is_not_checked_when_unset() -> None:
    body = make_body()

    assert verify(bearer(make_claims(body, iss="anyone")), body, issuer=None).chat_id == CHAT


def test_expired_token_is_rejected() -> None:
    body = make_body()

    expect_rejection("expired", bearer(make_claims(body, exp=int(NOW) - 10)), body)


def test_expiry_allows_only_a_tiny_leeway() -> None:
    body = make_body()
    token = bearer(make_claims(body, exp=int(NOW) - 2))

    assert verify(token, body).dispatch_id == "d-1"
    expect_rejection("expired", token, body, now=NOW + 10)


def test_token_not_valid_yet_is_rejected() -> None:
    body = make_body()

    expect_rejection("not_yet_valid", bearer(make_claims(body, nbf=int(NOW) + 60)), body)


def test_token_issued_in_the_future_is_rejected() -> None:
    body = make_body()

    expect_rejection("not_yet_valid", bearer(make_claims(body, iat=int(NOW) + 60)), body)


def test_non_numeric_time_claim_is_rejected() -> None:
    body = make_body()

    expect_rejection("invalid_token", bearer(make_claims(body, nbf="soon")), body)


@pytest.mark.parametrize("claim", ["exp", "jti", "sub", "type", "body_sha256", "aud"])
def test_required_claim_missing_is_rejected(claim: str) -> None:
    body = make_body()
    claims = make_claims(body)
    del claims[claim]

    expect_rejection("missing_claim", bearer(claims), body)


def test_jti_mismatch_is_rejected() -> None:
    body = make_body()

    expect_rejection("jti_mismatch", bearer(make_claims(body, jti="d-2")), body)


def test_type_mismatch_is_rejected() -> None:
    body = make_body()

    expect_rejection("type_mismatch", bearer(make_claims(body, type="stop")), body)


def test_sub_mismatch_is_rejected() -> None:
    body = make_body()

    expect_rejection("sub_mismatch", bearer(make_claims(body, sub="coder:chat:someone-else")), body)


def test_body_hash_mismatch_is_rejected() -> None:
    body = make_body()
    tampered = body.replace(b'"ls"', b'"rm"')

    expect_rejection("body_hash_mismatch", bearer(make_claims(body)), tampered)


def test_uppercase_body_hash_is_rejected() -> None:
    body = make_body()
    claims = make_claims(body, body_sha256=hashlib.sha256(body).hexdigest().upper())

    expect_rejection("body_hash_mismatch", bearer(claims), body)


@pytest.mark.parametrize("version", [2, 0, "1", True, None])
def test_meta_schema_version_other_than_1_is_rejected(version: object) -> None:
    body = make_body(schema_version=version)

    expect_rejection("schema_version_mismatch", bearer(make_claims(body)), body)


@pytest.mark.parametrize("version", [2, "1", True])
def test_claimed_schema_version_other_than_1_is_rejected(version: object) -> None:
    body = make_body()

    expect_rejection(
        "schema_version_mismatch", bearer(make_claims(body, schema_version=version)), body
    )


def test_schema_version_claim_may_be_absent() -> None:
    body = make_body()

    assert verify(bearer(make_claims(body, schema_version=None)), body).dispatch_id == "d-1"


@pytest.mark.parametrize(
    "body",
    [
        b"not json",
        b"\xff\xfe",
        b"[1]",
        json.dumps({"meta": {}, "data": {}}).encode(),
        json.dumps({"type": "stop", "meta": [], "data": {}}).encode(),
        json.dumps({"type": "stop", "meta": {"schema_version": 1}, "data": []}).encode(),
        json.dumps(
            {"type": "stop", "meta": {"schema_version": 1, "chat_id": CHAT, "owner_id": "u"}}
        ).encode(),
        json.dumps(
            {
                "type": "stop",
                "meta": {"schema_version": 1, "dispatch_id": "d-1", "chat_id": CHAT, "owner_id": 7},
            }
        ).encode(),
        make_body(turn_id=5),
    ],
)
def test_malformed_signed_body_is_rejected(body: bytes) -> None:
    claims = make_claims(make_body(), body_sha256=hashlib.sha256(body).hexdigest())

    expect_rejection("malformed_body", bearer(claims), body)


def test_signature_is_checked_before_the_body_is_read() -> None:
    garbage = b"\x00 not even json"
    claims = make_claims(make_body(), body_sha256=hashlib.sha256(garbage).hexdigest())

    expect_rejection("invalid_signature", bearer(claims, secret="y" * 32), garbage)


def test_auth_error_carries_a_stable_reason_and_a_message() -> None:
    error = CoderAuthError("expired", "the token has expired")

    assert error.reason == "expired"
    assert str(error) == "expired: the token has expired"


# --- ingest mapping --------------------------------------------------------------------------


def ingest_of(type_: str, data: dict[str, Any], **meta: Any) -> dict[str, Any]:
    body = make_body(type_, data, **meta)
    return wire_fields(coder_to_event(verify(bearer(make_claims(body)), body)))


def test_pre_tool_use_maps_to_tool_fields() -> None:
    fields = ingest_of(
        "pre_tool_use",
        {"tool_use_id": "t-1", "tool_name": "bash", "tool_input": {"cmd": "ls"}},
        turn_id="turn-1",
    )

    assert fields == {
        "event": "PreToolUse",
        "eventId": "d-1",
        "agent": "coder",
        "agentSessionId": CHAT,
        "turnId": "turn-1",
        "toolCallId": "t-1",
        "toolName": "bash",
        "toolInput": {"cmd": "ls"},
        "detail": {"ownerId": "u-1"},
    }


def test_post_tool_use_with_error_maps_to_failure() -> None:
    fields = ingest_of(
        "post_tool_use", {"tool_use_id": "t-1", "tool_name": "bash", "tool_error": "exit 1"}
    )

    assert fields["event"] == "PostToolUseFailure"
    assert fields["detail"]["error"] == "exit 1"
    assert "toolResponse" not in fields


def test_post_tool_use_with_response_maps_to_success() -> None:
    fields = ingest_of(
        "post_tool_use",
        {"tool_use_id": "t-1", "tool_name": "bash", "tool_response": "ok", "tool_error": None},
    )

    assert fields["event"] == "PostToolUse"
    assert fields["toolResponse"] == "ok"
    assert "error" not in fields["detail"]


def test_prompt_maps_with_parts_in_detail() -> None:
    fields = ingest_of("user_prompt_submit", {"prompt": "hi", "parts": [{"type": "text"}]})

    assert fields["event"] == "UserPromptSubmit"
    assert fields["prompt"] == "hi"
    assert fields["detail"]["parts"] == [{"type": "text"}]


@pytest.mark.parametrize(
    ("type_", "event"),
    [
        ("session_start", "SessionStart"),
        ("pre_compact", "PreCompact"),
        ("post_compact", "PostCompact"),
        ("stop", "Stop"),
        ("chat_renamed", "chat_renamed"),
    ],
)
def test_lifecycle_types_map_to_normalised_events(type_: str, event: str) -> None:
    fields = ingest_of(type_, {"source": "startup"} if type_ == "session_start" else {})

    assert fields["event"] == event
    assert fields["eventId"] == "d-1"
    assert "turnId" not in fields


def test_meta_extras_go_to_detail_without_clashing_with_tachograph_workspaces() -> None:
    fields = ingest_of(
        "session_start",
        {"source": "resume", "new_field": 1},
        workspace_id="cw-1",
        parent_chat_id="p-1",
        root_chat_id="r-1",
        future_meta="x",
    )

    assert fields["detail"] == {
        "source": "resume",
        "newField": 1,
        "ownerId": "u-1",
        "coderWorkspaceId": "cw-1",
        "parentChatId": "p-1",
        "rootChatId": "r-1",
        "futureMeta": "x",
    }


def test_session_key() -> None:
    assert coder_session_key(CHAT) == f"coder:{CHAT}"


# --- answers ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("coder_type", "decision", "answer"),
    [
        ("pre_tool_use", {"outcome": "pass"}, {}),
        (
            "pre_tool_use",
            {"outcome": "deny", "reason": "no rm"},
            {"permission": {"decision": "deny", "reason": "no rm"}, "user_message": "no rm"},
        ),
        (
            "user_prompt_submit",
            {"outcome": "deny"},
            {
                "permission": {"decision": "deny", "reason": "Denied by Tachograph policy."},
                "user_message": "Denied by Tachograph policy.",
            },
        ),
        (
            "pre_tool_use",
            {"outcome": "modify", "replacement": {"cmd": "ls -la"}},
            {"permission": {"decision": "allow", "input_override": {"cmd": "ls -la"}}},
        ),
        (
            "user_prompt_submit",
            {"outcome": "modify", "replacement": "be brief"},
            {"permission": {"decision": "allow", "input_override": {"prompt": "be brief"}}},
        ),
        (
            "pre_tool_use",
            {"outcome": "modify", "replacement": "not an object", "reason": "r"},
            {"permission": {"decision": "deny", "reason": "r"}, "user_message": "r"},
        ),
        ("pre_tool_use", {"outcome": "pass", "additionalContext": "ctx"}, {"model_context": "ctx"}),
        ("session_start", {"outcome": "pass", "additionalContext": "c"}, {"model_context": "c"}),
        ("stop", {"outcome": "continue", "reason": "more"}, {}),
        ("post_tool_use", {"outcome": "deny", "reason": "x"}, {}),
        ("stop", {"outcome": "pass"}, {}),
    ],
)
def test_decision_maps_to_coder_answer(
    coder_type: str, decision: dict[str, Any], answer: dict[str, Any]
) -> None:
    assert coder_answer(coder_type, decision) == answer


def test_model_context_is_capped_at_16_kib_on_a_character_boundary() -> None:
    context = "a" + "é" * MODEL_CONTEXT_MAX_BYTES  # 2 bytes each: the cut lands mid-character

    answer = coder_answer("pre_tool_use", {"outcome": "pass", "additionalContext": context})

    cut = answer["model_context"].encode("utf-8")
    assert len(cut) <= MODEL_CONTEXT_MAX_BYTES
    assert len(cut) == MODEL_CONTEXT_MAX_BYTES - 1
    assert context.startswith(answer["model_context"])


def test_model_context_at_the_cap_is_kept_whole() -> None:
    context = "x" * MODEL_CONTEXT_MAX_BYTES

    answer = coder_answer("stop", {"outcome": "pass", "additionalContext": context})

    assert answer == {"model_context": context}


@pytest.mark.parametrize("coder_type", ["user_prompt_submit", "pre_tool_use"])
def test_slow_mutable_event_is_denied_with_a_retry_message(coder_type: str) -> None:
    assert timeout_answer(coder_type) == {
        "permission": {"decision": "deny", "reason": TIMEOUT_REASON},
        "user_message": TIMEOUT_REASON,
    }
    assert "retry" in TIMEOUT_REASON


@pytest.mark.parametrize(
    "coder_type", ["session_start", "post_tool_use", "pre_compact", "post_compact", "stop"]
)
def test_slow_observational_event_gets_an_empty_answer(coder_type: str) -> None:
    assert timeout_answer(coder_type) == {}


def test_response_signature_binds_the_answer_to_the_request() -> None:
    answer = json.dumps({"permission": {"decision": "deny", "reason": "no"}}).encode()

    token = sign_coder_response(
        answer,
        secret=SECRET,
        jti="d-1",
        type_="pre_tool_use",
        sub=f"coder:chat:{CHAT}",
        audience=AUDIENCE,
        now=NOW,
    )

    assert jwt.get_unverified_header(token)["alg"] == "HS256"
    claims = jwt.decode(
        token,
        SECRET,
        algorithms=["HS256"],
        audience=AUDIENCE,
        options={"verify_exp": False, "verify_iat": False},
    )
    assert claims == {
        "jti": "d-1",
        "type": "pre_tool_use",
        "sub": f"coder:chat:{CHAT}",
        "aud": AUDIENCE,
        "iat": int(NOW),
        "exp": int(NOW) + 60,
        "body_sha256": hashlib.sha256(answer).hexdigest(),
    }


def test_response_signature_is_fresh_by_default() -> None:
    token = sign_coder_response(
        b"{}", secret=SECRET, jti="d", type_="stop", sub="coder:chat:c", audience=AUDIENCE
    )

    claims = jwt.decode(token, SECRET, algorithms=["HS256"], audience=AUDIENCE)
    assert 0 < claims["exp"] - claims["iat"] <= 60


def coder_answer(event: str, wire: dict[str, Any]) -> dict[str, Any]:
    return decision_to_coder(event, decision_of(wire))
