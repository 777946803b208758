"""Claude Code adapter: real captured payloads in, hook answers out (§6.5)."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest

from domain.casing import to_camel
from ingest.runtimes.claude_code import (
    AGENT,
    GATE_EVENTS,
    NORMALISED_EVENTS,
    ClaudePayloadError,
    claude_payload_to_event,
    decision_to_claude,
)
from tests.adapters.event_fields import decision_of, wire_fields

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "claude-code"

S0_CONTEXT = "e1159370-3902-493b-92bd-33e8e543e6f8"
S0_REWAKE = "8162cd02-1a29-4c4a-815a-120cf786776e"

# Per fixture: fields the ingest body must carry (absent: must not carry) and detail subset.
EXPECTED: dict[str, dict[str, Any]] = {
    "PostToolUse-1.json": {
        "fields": {
            "agentSessionId": S0_CONTEXT,
            "toolName": "Write",
            "toolCallId": "toolu_s0_5da6255bd1ef",
            "eventId": f"claude-code:{S0_CONTEXT}:PostToolUse:toolu_s0_5da6255bd1ef",
        },
        "present": ["toolInput", "toolResponse"],
        "detail": {"durationMs": 2, "permissionMode": "acceptEdits"},
    },
    "PostToolUse-2.json": {
        "fields": {"toolName": "Write", "toolCallId": "toolu_s0_a0a074f391c0"},
        "present": ["toolInput", "toolResponse", "eventId"],
        "detail": {"durationMs": 22},
    },
    "PostToolUseFailure-1.json": {
        "fields": {"agentSessionId": "s1", "turnId": "p1", "toolName": "Read"},
        "present": ["toolInput", "eventId"],
        "absent": ["toolResponse"],
        "detail": {
            "error": "File does not exist.",
            "isInterrupt": False,
            "effort": {"level": "medium"},
        },
    },
    "PostToolUseFailure-2.json": {
        "fields": {
            "toolName": "Bash",
            "toolCallId": "toolu_02",
            "eventId": "claude-code:s1:PostToolUseFailure:toolu_02",
        },
        "absent": ["toolInput", "turnId"],
        "detail": {"isInterrupt": True, "durationMs": 1420},
        "detail_absent": ["transcriptPath"],
    },
    "PreToolUse-1.json": {
        "fields": {
            "toolInput": {
                "content": "s0 write\n",
                "file_path": "<S0_TMP>/mock-context/repo/pos/cart.txt",
            },
            "eventId": f"claude-code:{S0_CONTEXT}:PreToolUse:toolu_s0_5da6255bd1ef",
        },
        "absent": ["toolResponse"],
    },
    "PreToolUse-2.json": {
        "fields": {"agentSessionId": S0_REWAKE, "toolCallId": "toolu_s0_d97d089f1e9c"},
        "present": ["eventId"],
    },
    "SessionEnd-1.json": {"detail": {"reason": "other"}, "absent": ["eventId"]},
    "SessionEnd-2.json": {"detail": {"reason": "prompt_input_exit"}, "absent": ["eventId"]},
    "SessionEnd-3.json": {"fields": {"turnId": "p1"}, "detail": {"reason": "other"}},
    "SessionStart-1.json": {
        "fields": {"model": "claude-sonnet-4-5", "agentSessionId": S0_REWAKE},
        "detail": {"source": "startup"},
    },
    "SessionStart-2.json": {"absent": ["model", "eventId"], "detail": {"source": "startup"}},
    "SessionStart-3.json": {"detail": {"source": "startup"}},
    "SessionStart-4.json": {
        "fields": {"agentSessionId": "a135d3b1-0387-4c0e-9783-7af541189238"},
        "detail": {"source": "startup", "cwd": "/private/tmp/claude-hook-schema-test"},
    },
    "Stop-1.json": {
        "fields": {"lastAssistantMessage": "S0 ack"},
        "absent": ["eventId"],
        "detail": {"stopHookActive": False, "backgroundTasks": [], "sessionCrons": []},
    },
    "Stop-2.json": {
        "fields": {"lastAssistantMessage": "S0 ack"},
        "detail": {"stopHookActive": True},
    },
    "Stop-3.json": {
        "fields": {"lastAssistantMessage": "Done.", "turnId": "p1"},
        "detail": {"stopHookActive": False, "permissionMode": "default"},
    },
    "Stop-4.json": {
        "absent": ["lastAssistantMessage", "turnId"],
        "detail": {"stopHookActive": False, "permissionMode": "bypassPermissions"},
    },
    "StopFailure-1.json": {
        "present": ["lastAssistantMessage"],
        "detail": {"error": "server_error"},
    },
    "StopFailure-2.json": {
        "fields": {
            "lastAssistantMessage": "API Error: Unable to connect to API (ConnectionRefused)"
        },
        "detail": {"error": "unknown"},
    },
    "StopFailure-3.json": {"detail": {"error": "rate_limit"}},
    "StopFailure-4.json": {
        "detail": {"error": "authentication_failed", "effort": {"level": "high"}}
    },
    "StopFailure-5.json": {
        "fields": {"lastAssistantMessage": "Credit balance is too low"},
        "detail": {"error": "billing_error"},
    },
    "UserPromptSubmit-1.json": {
        "fields": {
            "prompt": "S0 spike: use the Write tool to create pos/cart.txt containing 's0 write'. "
            "Then say what happened."
        },
        "absent": ["eventId"],
    },
    "UserPromptSubmit-2.json": {
        "fields": {"prompt": "S0 spike: use the Write tool to create pos/cart.txt."},
        "detail": {"permissionMode": "acceptEdits"},
    },
}


def load_payload(name: str) -> dict[str, Any]:
    """Return the hook JSON Claude Code sent, unwrapping capture envelopes
    (tests/fixtures/SOURCES.md)."""
    document = json.loads((FIXTURES / name).read_text(encoding="utf-8"))
    assert isinstance(document, dict)
    payload = document.get("payload")
    if "hook_event_name" not in document and isinstance(payload, dict):
        assert document["event"] == payload["hook_event_name"]
        return payload
    return document


def test_fixture_directory_is_found_and_every_file_has_expectations() -> None:
    files = sorted(p.name for p in FIXTURES.glob("*.json"))
    assert files, f"no fixtures under {FIXTURES}"
    assert files == sorted(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_real_payload_maps_to_ingest_fields(name: str) -> None:
    payload = load_payload(name)
    expected = EXPECTED[name]

    fields = claude_fields(payload)

    assert fields["event"] == payload["hook_event_name"] == name.rsplit("-", 1)[0]
    assert fields["event"] in NORMALISED_EVENTS
    assert fields["agent"] == AGENT
    assert fields["agentSessionId"] == payload["session_id"]
    for key, value in expected.get("fields", {}).items():
        assert fields[key] == value, key
    for key in expected.get("present", []):
        assert key in fields, key
    for key in expected.get("absent", []):
        assert key not in fields, key
    detail = fields["detail"]
    assert detail["cwd"] == payload["cwd"]
    for key, value in expected.get("detail", {}).items():
        assert detail[key] == value, key
    for key in expected.get("detail_absent", []):
        assert key not in detail
    assert all("_" not in key for key in detail), detail
    assert json.loads(json.dumps(fields)) == fields


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_real_payload_loses_no_field(name: str) -> None:
    payload = load_payload(name)

    fields = claude_fields(payload)

    carried = sum(1 for key in fields if key not in {"event", "agent", "detail", "eventId"})
    assert carried + len(fields["detail"]) == len(payload) - 1  # minus hook_event_name


def test_transcript_path_and_tool_response_are_kept_verbatim() -> None:
    payload = load_payload("PostToolUse-1.json")

    fields = claude_fields(payload)

    assert fields["detail"]["transcriptPath"] == payload["transcript_path"]
    # Nested keys are data, not field names: they are never camelCased.
    assert fields["toolResponse"] == payload["tool_response"]
    assert "originalFile" in fields["toolResponse"]
    assert fields["toolInput"] == {
        "content": "s0 write\n",
        "file_path": "<S0_TMP>/mock-context/repo/pos/cart.txt",
    }


def test_tool_event_ids_are_distinct_per_event_and_shared_by_redeliveries() -> None:
    pre = claude_fields(load_payload("PreToolUse-1.json"))
    post = claude_fields(load_payload("PostToolUse-1.json"))
    again = claude_fields(load_payload("PreToolUse-1.json"))

    assert pre["toolCallId"] == post["toolCallId"]
    assert pre["eventId"] != post["eventId"]
    assert pre["eventId"] == again["eventId"]


def test_subagent_fields_map_to_subagent_id_and_detail() -> None:
    payload = {
        "session_id": "s1",
        "hook_event_name": "SubagentStart",
        "agent_id": "agent-abc123",
        "agent_type": "Explore",
    }

    fields = claude_fields(payload)

    assert fields["subagentId"] == "agent-abc123"
    assert fields["detail"] == {"agentType": "Explore"}
    assert "eventId" not in fields


def test_notification_type_goes_to_detail() -> None:
    payload = {
        "session_id": "s1",
        "hook_event_name": "Notification",
        "message": "Claude needs your permission to use Bash",
        "notification_type": "permission_prompt",
    }

    fields = claude_fields(payload)

    assert fields["detail"] == {
        "message": "Claude needs your permission to use Bash",
        "notificationType": "permission_prompt",
    }


def test_unknown_event_and_unknown_fields_are_kept() -> None:
    payload = {
        "session_id": "s1",
        "hook_event_name": "PermissionRequest",
        "tool_name": "Bash",
        "permission_suggestions": [{"type": "addRules", "rule_content": "x"}],
        "brand_new_field": {"nested_key": 1},
    }

    fields = claude_fields(payload)

    assert fields["event"] == "PermissionRequest"
    assert fields["toolName"] == "Bash"
    assert fields["detail"] == {
        "permissionSuggestions": [{"type": "addRules", "rule_content": "x"}],
        "brandNewField": {"nested_key": 1},
    }


def test_wrong_types_stay_out_of_typed_fields_but_are_kept_in_detail() -> None:
    payload = {
        "hook_event_name": "PreToolUse",
        "session_id": 42,
        "tool_name": ["Bash"],
        "tool_input": "rm -rf /",
        "tool_use_id": None,
        "prompt": {"text": "hi"},
        "model": 3.5,
    }

    fields = claude_fields(payload)

    assert set(fields) == {"event", "agent", "detail"}
    assert fields["detail"] == {
        "sessionId": 42,
        "toolName": ["Bash"],
        "toolInput": "rm -rf /",
        "toolUseId": None,
        "prompt": {"text": "hi"},
        "model": 3.5,
    }


def test_first_spelling_wins_when_snake_and_camel_collide() -> None:
    payload = {"hook_event_name": "Stop", "stop_hook_active": True, "stopHookActive": False}

    assert claude_fields(payload)["detail"] == {"stopHookActive": True}


@pytest.mark.parametrize("body", [None, [], "Stop", 3, [{"hook_event_name": "Stop"}]])
def test_non_object_body_is_rejected(body: object) -> None:
    with pytest.raises(ClaudePayloadError, match="JSON object"):
        claude_fields(body)


@pytest.mark.parametrize("name", [None, "", 7, ["Stop"]])
def test_missing_or_unusable_event_name_is_rejected(name: object) -> None:
    payload: dict[str, object] = {"session_id": "s1"}
    if name is not None:
        payload["hook_event_name"] = name

    with pytest.raises(ClaudePayloadError, match="hook_event_name") as caught:
        claude_fields(payload)
    assert isinstance(caught.value, ValueError)


def _random_json(rng: random.Random, depth: int = 0) -> object:
    """Return an arbitrary JSON value."""
    kinds = ["null", "bool", "int", "float", "str"] + (["list", "dict"] if depth < 3 else [])
    kind = rng.choice(kinds)
    if kind == "list":
        return [_random_json(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    if kind == "dict":
        return {rng.choice(["a_b", "x", "tool_input"]): _random_json(rng, depth + 1)}
    return {
        "null": None,
        "bool": rng.random() < 0.5,
        "int": rng.randint(-5, 5),
        "float": rng.random(),
        "str": rng.choice(["", "Bash", "toolu_1", "é"]),
    }[kind]


def test_any_object_with_an_event_name_maps_without_error() -> None:
    rng = random.Random(6_5)
    keys = [
        "session_id",
        "tool_use_id",
        "tool_input",
        "tool_response",
        "prompt",
        "prompt_id",
        "agent_id",
        "model",
        "last_assistant_message",
        "stop_hook_active",
        "_odd",
        "x__y",
    ]
    for _ in range(500):
        payload = {key: _random_json(rng) for key in rng.sample(keys, rng.randint(0, len(keys)))}
        payload["hook_event_name"] = rng.choice([*NORMALISED_EVENTS, "Future"])

        fields = claude_fields(payload)

        assert fields["event"] == payload["hook_event_name"]
        assert len(fields) - 3 + len(fields["detail"]) - ("eventId" in fields) == len(payload) - 1


@pytest.mark.parametrize(
    ("name", "camel"),
    [
        ("stop_hook_active", "stopHookActive"),
        ("duration_ms", "durationMs"),
        ("alreadyCamel", "alreadyCamel"),
        ("_private", "_private"),
        ("trailing_", "trailing_"),
        ("x__y", "x__y"),
    ],
)
def test_to_camel(name: str, camel: str) -> None:
    assert to_camel(name) == camel


# --- decisions -------------------------------------------------------------------------------

DECISIONS: list[tuple[str, dict[str, Any], dict[str, Any], str | None]] = [
    # (event, combined decision, Claude Code answer, note substring or None)
    ("PreToolUse", {"outcome": "pass"}, {}, None),
    (
        "PreToolUse",
        {"outcome": "deny", "reason": "no writes"},
        {
            "hookSpecificOutput": {
                "hookEventName": "PreToolUse",
                "permissionDecision": "deny",
                "permissionDecisionReason": "no writes",
            }
        },
        None,
    ),
    (
        "PreToolUse",
        {"outcome": "deny"},
        {
            "hookSpecificOutput": {
                "hookEventName": "PreToolUse",
                "permissionDecision": "deny",
                "permissionDecisionReason": "Denied by Tachograph policy.",
            }
        },
        None,
    ),
    (
        "PreToolUse",
        {"outcome": "modify", "replacement": {"command": "ls"}},
        {
            "hookSpecificOutput": {
                "hookEventName": "PreToolUse",
                "permissionDecision": "allow",
                "updatedInput": {"command": "ls"},
            }
        },
        None,
    ),
    (
        "PreToolUse",
        {"outcome": "modify", "replacement": {"command": "ls"}, "reason": "safer"},
        {
            "hookSpecificOutput": {
                "hookEventName": "PreToolUse",
                "permissionDecision": "allow",
                "permissionDecisionReason": "safer",
                "updatedInput": {"command": "ls"},
            }
        },
        None,
    ),
    (
        "PreToolUse",
        {"outcome": "modify", "replacement": "ls"},
        {
            "hookSpecificOutput": {
                "hookEventName": "PreToolUse",
                "permissionDecision": "deny",
                "permissionDecisionReason": "Denied by Tachograph policy.",
            }
        },
        "without a JSON object replacement",
    ),
    (
        "PreToolUse",
        {"outcome": "pass", "additionalContext": "prod DB"},
        {"hookSpecificOutput": {"hookEventName": "PreToolUse", "additionalContext": "prod DB"}},
        None,
    ),
    (
        "PreToolUse",
        {"outcome": "deny", "reason": "r", "additionalContext": "ctx"},
        {
            "hookSpecificOutput": {
                "hookEventName": "PreToolUse",
                "permissionDecision": "deny",
                "permissionDecisionReason": "r",
                "additionalContext": "ctx",
            }
        },
        None,
    ),
    ("UserPromptSubmit", {"outcome": "pass"}, {}, None),
    (
        "UserPromptSubmit",
        {"outcome": "deny", "reason": "no secrets"},
        {"decision": "block", "reason": "no secrets"},
        None,
    ),
    (
        "UserPromptSubmit",
        {"outcome": "pass", "additionalContext": "branch main"},
        {
            "hookSpecificOutput": {
                "hookEventName": "UserPromptSubmit",
                "additionalContext": "branch main",
            }
        },
        None,
    ),
    (
        "Stop",
        {"outcome": "continue", "reason": "tests fail"},
        {"decision": "block", "reason": "tests fail"},
        None,
    ),
    (
        "Stop",
        {"outcome": "continue"},
        {"decision": "block", "reason": "Tachograph policy asks to keep working before stopping."},
        None,
    ),
    # §6.2: a closed failure denies Stop, i.e. the turn may not complete.
    (
        "Stop",
        {"outcome": "deny", "reason": "policy down"},
        {"decision": "block", "reason": "policy down"},
        None,
    ),
    (
        "Stop",
        {"outcome": "continue", "reason": "tests fail", "additionalContext": "run pytest"},
        {"decision": "block", "reason": "tests fail\n\nrun pytest"},
        None,
    ),
    ("Stop", {"outcome": "pass", "additionalContext": "x"}, {}, "additionalContext dropped"),
    ("Stop", {"outcome": "pass"}, {}, None),
    (
        "SessionStart",
        {"outcome": "pass", "additionalContext": "open issues: 3"},
        {
            "hookSpecificOutput": {
                "hookEventName": "SessionStart",
                "additionalContext": "open issues: 3",
            }
        },
        None,
    ),
    (
        "SubagentStart",
        {"outcome": "pass", "additionalContext": "read-only"},
        {
            "hookSpecificOutput": {
                "hookEventName": "SubagentStart",
                "additionalContext": "read-only",
            }
        },
        None,
    ),
    (
        "PostToolUse",
        {"outcome": "pass", "additionalContext": "generated file"},
        {
            "hookSpecificOutput": {
                "hookEventName": "PostToolUse",
                "additionalContext": "generated file",
            }
        },
        None,
    ),
    (
        "PostToolUseFailure",
        {"outcome": "pass", "additionalContext": "retry with sudo? no"},
        {
            "hookSpecificOutput": {
                "hookEventName": "PostToolUseFailure",
                "additionalContext": "retry with sudo? no",
            }
        },
        None,
    ),
    (
        "Notification",
        {"outcome": "pass", "additionalContext": "n"},
        {"hookSpecificOutput": {"hookEventName": "Notification", "additionalContext": "n"}},
        None,
    ),
    ("SessionEnd", {"outcome": "pass", "additionalContext": "x"}, {}, "additionalContext dropped"),
    ("PreCompact", {"outcome": "pass", "additionalContext": "x"}, {}, "additionalContext dropped"),
    ("PostCompact", {"outcome": "pass"}, {}, None),
    ("StopFailure", {"outcome": "pass"}, {}, None),
    ("SubagentStop", {"outcome": "pass"}, {}, None),
    ("TaskCreated", {"outcome": "pass"}, {}, None),
    ("PreToolUse", {}, {}, None),
    ("SessionEnd", {"outcome": "deny", "reason": "r"}, {}, "no decision control"),
]


@pytest.mark.parametrize(("event", "decision", "answer", "note"), DECISIONS)
def test_decision_maps_to_claude_answer(
    event: str, decision: dict[str, Any], answer: dict[str, Any], note: str | None
) -> None:
    got_answer, got_note = claude_answer(event, decision)

    assert got_answer == answer
    if note is None:
        assert got_note is None
    else:
        assert got_note is not None and note in got_note


def test_prompt_rewrite_blocks_with_the_replacement_and_says_so() -> None:
    answer, note = claude_answer(
        "UserPromptSubmit",
        {"outcome": "modify", "reason": "secrets removed", "replacement": "deploy to staging"},
    )

    assert answer["decision"] == "block"
    assert answer["reason"].startswith("secrets removed\n\n")
    assert answer["reason"].endswith("Replacement prompt:\ndeploy to staging")
    assert set(answer) == {"decision", "reason"}
    assert note == (
        "UserPromptSubmit modify is not expressible in Claude Code; "
        "answered block with the replacement in the reason"
    )


def test_prompt_rewrite_without_reason_still_explains_itself() -> None:
    answer, note = claude_answer("UserPromptSubmit", {"outcome": "modify", "replacement": "p2"})

    assert answer == {
        "decision": "block",
        "reason": "Tachograph policy rewrote this prompt, which Claude Code cannot apply here, "
        "so it was blocked. Replacement prompt:\np2",
    }
    assert note is not None


@pytest.mark.parametrize("outcome", ["deny", "modify"])
def test_subagent_start_gate_stops_claude_because_it_cannot_block(outcome: str) -> None:
    answer, note = claude_answer(
        "SubagentStart", {"outcome": outcome, "reason": "no explorers", "replacement": "be careful"}
    )

    assert answer["continue"] is False
    assert answer["stopReason"].startswith("no explorers")
    assert ("be careful" in answer["stopReason"]) is (outcome == "modify")
    assert note is not None and "SubagentStart" in note and "continue=false" in note


def test_unknown_outcome_is_treated_as_deny_on_a_gate() -> None:
    answer, note = claude_answer("UserPromptSubmit", {"outcome": "maybe"})

    assert answer == {"decision": "block", "reason": "Blocked by Tachograph policy."}
    assert note is not None and "unknown outcome 'maybe'" in note


def test_non_text_reason_is_serialised() -> None:
    answer, _ = claude_answer("UserPromptSubmit", {"outcome": "deny", "reason": {"code": 7}})

    assert answer == {"decision": "block", "reason": '{"code": 7}'}


@pytest.mark.parametrize("event", sorted(GATE_EVENTS))
def test_every_gate_can_express_a_deny(event: str) -> None:
    answer, _ = claude_answer(event, {"outcome": "deny", "reason": "r"})

    assert answer  # a non-empty answer is what stops the action
    assert json.loads(json.dumps(answer)) == answer


def claude_fields(payload: object) -> dict[str, Any]:
    """The adapter's LifecycleEvent, seen under its §6.3 field names (absent: left out)."""
    return wire_fields(claude_payload_to_event(payload))


def claude_answer(event: str, wire: dict[str, Any]) -> tuple[dict[str, Any], str | None]:
    return decision_to_claude(event, decision_of(wire))
