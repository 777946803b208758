"""Pure reflection policy: redaction, the rules reflector, the strict answer contract,
the reflector configuration (SPEC §8.1, §8.2)."""

from __future__ import annotations

import json

import pytest

from domain.learned_target import overlay_content
from domain.redaction import REDACTED, contains_secret, evidence, redact_secrets
from domain.reflection import (
    Decision,
    ReflectionFailed,
    ReflectorConfig,
    RulesReflector,
    SignalEvidence,
    lesson_key,
)
from infra.reflector import ReflectorConfigError, parse_reflector_answer, parse_reflector_config


def signal(**fields: str | None) -> SignalEvidence:
    base: dict[str, str | None] = {
        "id": "s1",
        "agent_id": "claude",
        "trace_id": "t1",
        "kind": "failure",
        "goal": "Fix the flaky login test\nand more",
        "outcome": None,
        "failure": "AssertionError: expected 200\ntraceback...",
        "failure_class": "validation",
    }
    return SignalEvidence(**{**base, **fields})  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("secret", "sensitive"),
    [
        ("Authorization: Bearer abcdef0123456789.xyz", "abcdef0123456789"),
        ("bearer ya29.a0AfH6SMBx-token_value", "ya29.a0AfH6SMBx"),
        ("sk-ant-api03-AbCdEfGhIjKlMnOpQrStUv", "AbCdEfGhIjKlMnOp"),
        ("sk-proj-0123456789abcdefABCDEF", "0123456789abcdef"),
        ("ghp_0123456789abcdefghijABCDEFGHIJ012345", "0123456789abcdefghij"),
        ("github_pat_11ABCDEFG0123456789_abcdefghijklmnop", "11ABCDEFG0123456789"),
        ("xoxb-123456789012-abcdefghijkl", "123456789012"),
        ("AKIAIOSFODNN7EXAMPLE", "IOSFODNN7"),
        ("AIzaSyA-0123456789abcdefghijklmnopqrstu", "0123456789abcdefghij"),
        (
            "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0In0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
            "dozjgNryP4J3jVmNHl0w5N",
        ),
        ("api_key=0123456789abcdef", "0123456789abcdef"),
        ('export ANTHROPIC_API_KEY="s3cr3t-value-here"', "s3cr3t-value-here"),
        ("password: hunter2hunter2", "hunter2hunter2"),
        ("client_secret: abcdefghijk", "abcdefghijk"),
        ("opaque Zx9Qw8Er7Ty6Ui5Op4As3Df2Gh1Jk0LmNbVc", "Zx9Qw8Er7Ty6Ui5Op4As3"),
        (
            "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\n"
            "-----END PRIVATE KEY-----",
            "MIIEvQIBADANBgkqhkiG9w0BAQEFAASC",
        ),
        ("-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA (cut off", "b3BlbnNzaC1"),
        (
            "-----BEGIN EC PRIVATE KEY-----\nMHcCAQEEIBkg\n-----END EC PRIVATE KEY-----",
            "MHcCAQEEIBkg",
        ),
    ],
)
def test_secrets_are_redacted(secret: str, sensitive: str) -> None:
    text = f"before {secret} after"
    redacted = redact_secrets(text)
    assert REDACTED in redacted and sensitive not in redacted
    assert redacted.startswith("before ")
    assert contains_secret(text) and not contains_secret(redacted)


@pytest.mark.parametrize(
    "plain",
    [
        "make: *** [build] Error 2",
        "commit 3f786850e387550fdab836ed7e6dc881de23001b broke it",
        "uuid 5b3f7c1e-2d4a-5e8f-9a61-7c0d2b4e8f13",
        "the token expiration is 30 minutes; max_tokens=4096",
        "the bearer of bad news",
        "see https://example.com/docs/getting-started",
    ],
)
def test_ordinary_evidence_is_left_alone(plain: str) -> None:
    assert redact_secrets(plain) == plain and not contains_secret(plain)


def test_evidence_is_redacted_before_it_is_cut() -> None:
    # A key straddling the 2 KiB cut must not survive as a recognisable prefix.
    text = "x" * 2030 + " sk-ant-api03-" + "Ab1" * 20
    stored = evidence(text)
    assert stored is not None and len(stored.encode()) <= 2048 and "sk-ant" not in stored
    assert evidence(None) is None and evidence("short") == "short"


def test_rules_reflector_is_deterministic() -> None:
    rules = RulesReflector()
    lesson = rules.reflect(signal(), [])
    assert lesson == rules.reflect(signal(), [{"kind": "overlay"}])
    # Each failure pattern has its own overlay target (the class first in its key).
    assert lesson.strategy == "overlay" and lesson.key == lesson_key(
        "validation", "AssertionError: expected 404\ntraceback..."
    )
    assert lesson.key is not None and lesson.key.startswith("lesson.validation-")
    assert lesson.content is not None
    assert "Fix the flaky login test" in lesson.content and "(validation)" in lesson.content
    assert "and more" not in lesson.content  # first lines only
    skill = rules.reflect(
        signal(kind="outcome", outcome="Retried with a fresh DB", failure=None), []
    )
    assert (skill.strategy, skill.key) == ("skill", "fix-the-flaky-login-test")
    assert skill.content is not None and "Retried with a fresh DB" in skill.content
    assert rules.reflect(signal(kind="outcome", outcome="  ", failure=None), []) == Decision("none")
    assert rules.reflect(signal(failure=None, failure_class=None), []) == Decision("none")


def answer(**fields: object) -> bytes:
    return json.dumps({"schemaVersion": 1, **fields}).encode()


def test_valid_answers_parse_into_decisions() -> None:
    assert parse_reflector_answer(200, answer(strategy="none")) == Decision("none")
    assert parse_reflector_answer(200, answer(strategy="overlay", content="Be brief.")) == Decision(
        "overlay", "instructions", "Be brief."
    )
    assert parse_reflector_answer(
        201, answer(strategy="skill", key="db.reset-2", content="steps")
    ) == Decision("skill", "db.reset-2", "steps")
    assert parse_reflector_answer(
        200, answer(strategy="fact", key="prefers-pnpm", content="true")
    ) == Decision("fact", "prefers-pnpm", "true")


@pytest.mark.parametrize(
    ("status", "body"),
    [
        (500, answer(strategy="none")),
        (302, answer(strategy="none")),
        (None, None),
        (200, b""),
        (200, b"not json"),
        (200, b"\xff\xfe"),
        (200, b"[1, 2]"),
        (200, b'{"schemaVersion": 1, "strategy": "none", "strategy": "skill"}'),
        (200, b'{"schemaVersion": 1, "strategy": "fact", "key": "k", "content": NaN}'),
        (200, json.dumps({"strategy": "none"}).encode()),
        (200, answer(strategy="none", schemaVersion=2)),
        (200, json.dumps({"schemaVersion": True, "strategy": "none"}).encode()),
        (200, answer(strategy="rewrite-everything")),
        (200, answer(strategy=1)),
        (200, answer(strategy="none", extra=1)),
        (200, answer(strategy="none", content="why")),
        (200, answer(strategy="skill", content="no key")),
        (200, answer(strategy="skill", key="Bad_Key", content="c")),
        (200, answer(strategy="skill", key="-leading", content="c")),
        (200, answer(strategy="fact", key="k" * 64, content="c")),
        (200, answer(strategy="overlay", content="")),
        (200, answer(strategy="overlay", content=["list"])),
        (200, answer(strategy="skill", key="k", content="é" * 2049)),
        (200, b" " * (64 * 1024 + 1)),
    ],
)
def test_anything_else_is_a_failed_attempt(status: int | None, body: bytes | None) -> None:
    with pytest.raises(ReflectionFailed):
        parse_reflector_answer(status, body)


def test_reflector_configuration_follows_the_hook_url_rules() -> None:
    hosts = frozenset({"reflect.example.com"})

    def parse(raw: str | None, loopback: bool = False) -> ReflectorConfig:
        return parse_reflector_config(raw, allowed_hosts=hosts, allow_insecure_loopback=loopback)

    assert parse(None).kind == parse("rules").kind == "rules"
    config = parse('{"type": "http", "url": "https://reflect.example.com/r", "secretEnv": "RS"}')
    assert config.secret_env == "RS"
    ok_loopback = parse('{"type": "http", "url": "http://127.0.0.1:9/r", "timeoutMs": 50}', True)
    assert ok_loopback.handler is not None and ok_loopback.handler.timeout_ms == 50
    for bad, message in (
        ("llm", "JSON object"),
        ("[]", "JSON object"),
        ('{"type": "grpc", "url": "https://reflect.example.com"}', "type"),
        ('{"type": "http", "url": "http://reflect.example.com"}', "https://"),
        ('{"type": "http", "url": "https://other.example.com"}', "TACHOGRAPH_HOOK_ALLOWED_HOSTS"),
        ('{"type": "http", "url": "https://u:p@reflect.example.com"}', "credentials"),
        ('{"type": "http", "url": "http://127.0.0.1:9/r"}', "https://"),
        ('{"type": "http", "url": "https://reflect.example.com", "timeoutMs": 0}', "timeoutMs"),
        ('{"type": "http", "url": "https://reflect.example.com", "secretEnv": "1x"}', "secretEnv"),
        ('{"type": "http", "url": "https://reflect.example.com", "model": "x"}', "unknown key"),
    ):
        with pytest.raises(ReflectorConfigError, match=message):
            parse(bad)


def test_an_overlay_keeps_its_newest_instructions_within_16_kib() -> None:
    content = None
    for n in range(40):
        content = overlay_content(content, f"{n:02d} " + "x" * 1000)
    assert content is not None and len(content.encode()) <= 16 * 1024
    lines = content.split("\n")
    assert lines[-1].startswith("39 ") and not any(line.startswith("00 ") for line in lines)
