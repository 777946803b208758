"""Pure task policy: retry decisions, backoff, error classes, bounded records."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from domain.task_policy import (
    RECORD_LIMIT_BYTES,
    Backoff,
    after_failure,
    bound_record,
    classify_failure,
    remediation_prompt,
)


def test_only_self_update_tasks_retry_and_only_transient_classes() -> None:
    assert after_failure("self-update", "timeout", 1, 3) == "retry"
    assert after_failure("self-update", "provider", 2, 3) == "retry"
    assert after_failure("self-update", "database", 3, 3) == "dead-letter"
    assert after_failure("self-update", "validation", 1, 3) == "failed"
    assert after_failure("user", "timeout", 1, 3) == "failed"
    assert after_failure("schedule", "infrastructure", 1, 3) == "failed"


def test_backoff_doubles_up_to_the_cap() -> None:
    backoff = Backoff(base_s=30, cap_s=300)
    assert [backoff.delay(n) for n in range(1, 7)] == [
        timedelta(seconds=s) for s in (30, 60, 120, 240, 300, 300)
    ]
    assert backoff.delay(10_000) == timedelta(seconds=300)


@pytest.mark.parametrize(
    ("code", "text", "expected"),
    [
        (1, "Error: 429 rate limit exceeded", "provider"),
        (1, "API Error: 529 Overloaded", "provider"),
        (1, "connect ECONNREFUSED 10.0.0.1:443", "infrastructure"),
        (1, "request timed out", "infrastructure"),
        (1, "psycopg.OperationalError: server closed", "database"),
        (1, "PreToolUse hook denied: Bash", "hook_denied"),
        (1, "Permission denied: /etc/shadow", "permission"),
        (1, "error: unknown option '--frobnicate'", "validation"),
        (1, "bash: foo: command not found", "configuration"),
        (127, "", "configuration"),
        (126, "", "permission"),
        (-9, "", "infrastructure"),
        (3, "it went wrong", "unknown"),
    ],
)
def test_failures_are_classified(code: int, text: str, expected: str) -> None:
    assert classify_failure(code, text) == expected


def test_records_are_bounded_to_8_kib_keeping_their_identity() -> None:
    record = {
        "seq": 7,
        "attempt": 2,
        "at": "2026-01-01T00:00:00.000000Z",
        "kind": "tool_result",
        "tool": "Bash",
        "args": {"command": "x" * 20_000},
        "result": 'é"\n' * 10_000,
    }
    bounded = bound_record(record)
    assert (
        len(json.dumps(bounded, ensure_ascii=False, separators=(",", ":")).encode())
        <= RECORD_LIMIT_BYTES
    )
    assert (bounded["seq"], bounded["attempt"], bounded["kind"], bounded["tool"]) == (
        7,
        2,
        "tool_result",
        "Bash",
    )
    assert bounded["result"].endswith("…[truncated]")
    small = {"seq": 1, "attempt": 1, "kind": "text", "text": "hi"}
    assert bound_record(small) == small


def test_remediation_prompt_embeds_prompt_error_and_last_activity() -> None:
    prompt = remediation_prompt(
        "t-1",
        "Fix the flaky test",
        "failed",
        1,
        "provider",
        "exit code 1: 429",
        [
            {"kind": "tool_call", "tool": "Bash", "text": None, "result": None},
            {"kind": "text", "text": "giving up"},
        ],
    )
    assert "Fix the flaky test" in prompt
    assert "Error (provider):\nexit code 1: 429" in prompt
    assert "- [text] giving up" in prompt
    assert "- [tool_call Bash]" in prompt
