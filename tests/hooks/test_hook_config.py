"""Tests of TACHOGRAPH_HOOKS parsing and validation (spec §6.1)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from domain.hook_config import (
    EVENT_OUTCOMES,
    GATE_EVENTS,
    OBSERVATIONAL_EVENTS,
    HookConfig,
    HookHandler,
)
from infra.hook_config_parser import HookConfigError, parse_hook_config

ALLOWED = frozenset({"hooks.example.com", "policy.example.org"})


def parse(doc: Any, *, loopback: bool = False, hosts: frozenset[str] = ALLOWED) -> HookConfig:
    """Parse a document given as a Python value (or a raw string)."""
    raw = doc if isinstance(doc, str) else json.dumps(doc)
    return parse_hook_config(raw, allowed_hosts=hosts, allow_insecure_loopback=loopback)


def handler(**overrides: Any) -> dict[str, Any]:
    """A valid handler object with overrides (None removes a key)."""
    base: dict[str, Any] = {
        "id": "tool-policy",
        "type": "http",
        "url": "https://hooks.example.com/policy",
    }
    base.update(overrides)
    return {k: v for k, v in base.items() if v is not None}


def one(event: str = "PreToolUse", **overrides: Any) -> dict[str, Any]:
    """A document with a single handler."""
    return {"version": 1, "hooks": {event: [handler(**overrides)]}}


def error_of(doc: Any, **kwargs: Any) -> str:
    """The HookConfigError message for `doc`."""
    with pytest.raises(HookConfigError) as info:
        parse(doc, **kwargs)
    return str(info.value)


def test_event_tables_match_spec() -> None:
    assert set(EVENT_OUTCOMES) == OBSERVATIONAL_EVENTS | GATE_EVENTS
    assert not OBSERVATIONAL_EVENTS & GATE_EVENTS
    assert sorted(GATE_EVENTS) == ["PreToolUse", "Stop", "SubagentStart", "UserPromptSubmit"]
    # `ask` holds the call for an operator's approval (TACHOGRAPH_APPROVALS, §6).
    assert EVENT_OUTCOMES["PreToolUse"] == {"pass", "deny", "modify", "ask"}
    assert EVENT_OUTCOMES["Stop"] == {"pass", "continue"}
    assert len(OBSERVATIONAL_EVENTS) == 11
    assert all(EVENT_OUTCOMES[e] == {"pass"} for e in OBSERVATIONAL_EVENTS)


@pytest.mark.parametrize("raw", [None, "", "   \n"])
def test_absent_configuration_is_empty(raw: str | None) -> None:
    config = parse_hook_config(raw, allowed_hosts=frozenset(), allow_insecure_loopback=False)
    assert config == HookConfig.empty()
    assert config.handlers_for("PreToolUse", "Bash") == []


def test_spec_example_parses() -> None:
    raw = """{"version": 1,
     "hooks": {"PreToolUse": [{"id": "tool-policy", "type": "http",
       "url": "https://hooks.example.com/policy", "matcher": ["Bash", "Write"],
       "timeoutMs": 2000, "failureMode": "closed", "secretEnv": "POLICY_HOOK_SECRET"}]}}"""
    config = parse(raw)
    assert config.handlers == {
        "PreToolUse": (
            HookHandler(
                id="tool-policy",
                event="PreToolUse",
                url="https://hooks.example.com/policy",
                matcher=("Bash", "Write"),
                timeout_ms=2000,
                failure_mode="closed",
                secret_env="POLICY_HOOK_SECRET",
            ),
        )
    }
    assert config.secret_env_names() == {"POLICY_HOOK_SECRET"}


def test_defaults_for_gate_and_observational_events() -> None:
    doc = {
        "version": 1,
        "hooks": {
            "PreToolUse": [handler(id="a")],
            "Stop": [handler(id="b")],
            "PostToolUse": [handler(id="c")],
            "SessionStart": [handler(id="d", failureMode="open")],
        },
    }
    config = parse(doc)
    (gate,) = config.handlers["PreToolUse"]
    (stop,) = config.handlers["Stop"]
    (post,) = config.handlers["PostToolUse"]
    (start,) = config.handlers["SessionStart"]
    assert (gate.failure_mode, gate.timeout_ms, gate.matcher, gate.secret_env) == (
        "closed",
        2000,
        None,
        None,
    )
    assert stop.failure_mode == "closed"
    assert post.failure_mode == "open"
    assert start.failure_mode == "open"


def test_gate_event_may_fail_open_and_timeouts_at_bounds() -> None:
    doc = {
        "version": 1,
        "hooks": {
            "PreToolUse": [
                handler(id="a", failureMode="open", timeoutMs=1),
                handler(id="b", timeoutMs=30000),
            ]
        },
    }
    a, b = parse(doc).handlers["PreToolUse"]
    assert (a.failure_mode, a.timeout_ms) == ("open", 1)
    assert b.timeout_ms == 30000


def test_missing_hooks_key_means_no_hooks_and_empty_lists_are_dropped() -> None:
    assert parse({"version": 1}) == HookConfig.empty()
    assert parse({"version": 1, "hooks": {"PreToolUse": []}}).handlers == {}


def test_same_id_in_different_events_is_allowed() -> None:
    doc = {"version": 1, "hooks": {"PreToolUse": [handler()], "PostToolUse": [handler()]}}
    config = parse(doc)
    assert config.handlers["PreToolUse"][0].id == config.handlers["PostToolUse"][0].id


def test_handlers_for_matches_exactly_and_keeps_order() -> None:
    doc = {
        "version": 1,
        "hooks": {
            "PreToolUse": [
                handler(id="bash-only", matcher=["Bash"]),
                handler(id="all"),
                handler(id="write-or-edit", matcher=["Write", "Edit"]),
            ],
            "SubagentStart": [handler(id="sub", matcher=["agent-7"])],
        },
    }
    config = parse(doc)

    def ids(handlers: list[HookHandler]) -> list[str]:
        return [h.id for h in handlers]

    assert ids(config.handlers_for("PreToolUse", "Bash")) == ["bash-only", "all"]
    assert ids(config.handlers_for("PreToolUse", "Edit")) == ["all", "write-or-edit"]
    assert ids(config.handlers_for("PreToolUse", "bash")) == ["all"]
    assert ids(config.handlers_for("PreToolUse", "Bas")) == ["all"]
    assert ids(config.handlers_for("PreToolUse", None)) == ["all"]
    assert ids(config.handlers_for("SubagentStart", "agent-7")) == ["sub"]
    assert ids(config.handlers_for("SubagentStart", "agent-8")) == []
    assert config.handlers_for("PostToolUse", "Bash") == []
    assert config.handlers_for("NoSuchEvent", None) == []


def test_loopback_http_allowed_only_with_flag() -> None:
    for url in ("http://127.0.0.1:8123/h", "http://localhost/h", "http://[::1]:9/h"):
        config = parse(one(url=url), loopback=True, hosts=frozenset())
        assert config.handlers["PreToolUse"][0].url == url
        assert error_of(one(url=url), hosts=frozenset({"127.0.0.1", "localhost", "::1"})) == (
            "hooks.PreToolUse[0].url: must use https:// "
            "(set TACHOGRAPH_HOOK_ALLOW_INSECURE_LOOPBACK=1 for http:// on loopback)"
        )


def test_https_loopback_with_flag_needs_no_allow_list_entry() -> None:
    config = parse(one(url="https://localhost:8443/h"), loopback=True, hosts=frozenset())
    assert config.handlers["PreToolUse"][0].url == "https://localhost:8443/h"


def test_host_comparison_is_case_insensitive_but_exact() -> None:
    assert parse(one(url="https://HOOKS.example.com/p"))
    message = error_of(one(url="https://evil.hooks.example.com/p"))
    assert message.startswith("hooks.PreToolUse[0].url: host ")
    assert "TACHOGRAPH_HOOK_ALLOWED_HOSTS" in message


INVALID: list[tuple[str, Any, dict[str, Any], str]] = [
    ("invalid json", '{"version": 1,', {}, "$: invalid JSON"),
    ("not an object", "[1]", {}, "$: must be a JSON object"),
    ("nan", '{"version": NaN}', {}, "$: invalid JSON"),
    ("unknown top key", {"version": 1, "hooks": {}, "extra": 1}, {}, "extra: unknown key"),
    ("duplicate top key", '{"version": 1, "version": 1}', {}, "version: duplicate key"),
    ("no version", {"hooks": {}}, {}, "version: required"),
    ("version 2", {"version": 2}, {}, "version: must be 1"),
    ("version true", {"version": True}, {}, "version: must be 1"),
    ("version float", '{"version": 1.0}', {}, "version: must be 1"),
    ("version string", {"version": "1"}, {}, "version: must be 1"),
    ("hooks list", {"version": 1, "hooks": []}, {}, "hooks: must be a JSON object"),
    ("unknown event", {"version": 1, "hooks": {"Foo": []}}, {}, "hooks.Foo: unknown event"),
    (
        "odd event name",
        {"version": 1, "hooks": {"Pre Tool": []}},
        {},
        'hooks["Pre Tool"]: unknown event',
    ),
    (
        "event not list",
        {"version": 1, "hooks": {"PreToolUse": {}}},
        {},
        "hooks.PreToolUse: must be a list of handlers",
    ),
    (
        "handler not object",
        {"version": 1, "hooks": {"PreToolUse": ["x"]}},
        {},
        "hooks.PreToolUse[0]: must be a JSON object",
    ),
    ("unknown handler key", one(headers={}), {}, "hooks.PreToolUse[0].headers: unknown key"),
    (
        "duplicate handler key",
        '{"version":1,"hooks":{"Stop":[{"id":"a","id":"b","type":"http",'
        '"url":"https://hooks.example.com/"}]}}',
        {},
        "hooks.Stop[0].id: duplicate key",
    ),
    ("missing id", one(id=None), {}, "hooks.PreToolUse[0].id: required"),
    ("empty id", one(id=""), {}, "hooks.PreToolUse[0].id: must be a non-empty string"),
    ("blank id", one(id="  "), {}, "hooks.PreToolUse[0].id: must be a non-empty string"),
    ("numeric id", one(id=5), {}, "hooks.PreToolUse[0].id: must be a non-empty string"),
    ("missing type", one(type=None), {}, "hooks.PreToolUse[0].type: required"),
    ("command type", one(type="command"), {}, 'hooks.PreToolUse[0].type: must be "http"'),
    ("missing url", one(url=None), {}, "hooks.PreToolUse[0].url: required"),
    ("numeric url", one(url=3), {}, "hooks.PreToolUse[0].url: must be a non-empty string"),
    (
        "http url",
        one(url="http://hooks.example.com/p"),
        {},
        "hooks.PreToolUse[0].url: must use https://",
    ),
    (
        "http non-loopback with flag",
        one(url="http://hooks.example.com/p"),
        {"loopback": True},
        "hooks.PreToolUse[0].url: must use https://",
    ),
    ("ftp url", one(url="ftp://hooks.example.com/p"), {}, "hooks.PreToolUse[0].url: must use"),
    ("relative url", one(url="/policy"), {}, "hooks.PreToolUse[0].url: must use https://"),
    (
        "host not allowed",
        one(url="https://other.example.com/p"),
        {},
        'hooks.PreToolUse[0].url: host "other.example.com" is not in',
    ),
    (
        "loopback https without flag",
        one(url="https://127.0.0.1/p"),
        {},
        'hooks.PreToolUse[0].url: host "127.0.0.1" is not in',
    ),
    (
        "credentials",
        one(url="https://user:pw@hooks.example.com/p"),
        {},
        "hooks.PreToolUse[0].url: must not contain credentials",
    ),
    (
        "user only",
        one(url="https://user@hooks.example.com/p"),
        {},
        "hooks.PreToolUse[0].url: must not contain credentials",
    ),
    (
        "credentials on loopback",
        one(url="http://u:p@127.0.0.1/p"),
        {"loopback": True},
        "hooks.PreToolUse[0].url: must not contain credentials",
    ),
    ("no host", one(url="https:///p"), {}, "hooks.PreToolUse[0].url: must name a host"),
    (
        "bad port",
        one(url="https://hooks.example.com:99999/p"),
        {},
        "hooks.PreToolUse[0].url: invalid port",
    ),
    (
        "backslash",
        one(url="https://hooks.example.com\\@evil.com/"),
        {},
        "hooks.PreToolUse[0].url: must be an ASCII URL",
    ),
    (
        "whitespace",
        one(url="https://hooks.example.com/ p"),
        {},
        "hooks.PreToolUse[0].url: must be an ASCII URL",
    ),
    (
        "non ascii",
        one(url="https://hooks.exämple.com/"),
        {},
        "hooks.PreToolUse[0].url: must be an ASCII URL",
    ),
    ("timeout zero", one(timeoutMs=0), {}, "hooks.PreToolUse[0].timeoutMs: must be an integer"),
    ("timeout big", one(timeoutMs=30001), {}, "hooks.PreToolUse[0].timeoutMs: must be an"),
    ("timeout float", one(timeoutMs=2000.0), {}, "hooks.PreToolUse[0].timeoutMs: must be an"),
    ("timeout bool", one(timeoutMs=True), {}, "hooks.PreToolUse[0].timeoutMs: must be an"),
    ("timeout string", one(timeoutMs="2000"), {}, "hooks.PreToolUse[0].timeoutMs: must be an"),
    (
        "failure mode value",
        one(failureMode="fail"),
        {},
        'hooks.PreToolUse[0].failureMode: must be "open" or "closed"',
    ),
    (
        "failure mode type",
        one(failureMode=False),
        {},
        'hooks.PreToolUse[0].failureMode: must be "open" or "closed"',
    ),
    (
        "closed observational",
        one("PostToolUse", failureMode="closed"),
        {},
        'hooks.PostToolUse[0].failureMode: observational events are always open; "closed" is '
        "not allowed",
    ),
    ("matcher string", one(matcher="Bash"), {}, "hooks.PreToolUse[0].matcher: must be a non-emp"),
    ("matcher empty", one(matcher=[]), {}, "hooks.PreToolUse[0].matcher: must be a non-empty"),
    ("matcher number", one(matcher=[1]), {}, "hooks.PreToolUse[0].matcher: must be a non-empty"),
    ("matcher blank", one(matcher=[""]), {}, "hooks.PreToolUse[0].matcher: must be a non-empty"),
    (
        "matcher on unmatchable event",
        one("Stop", matcher=["Bash"]),
        {},
        "hooks.Stop[0].matcher: only tool and subagent events take a matcher",
    ),
    ("secret empty", one(secretEnv=""), {}, "hooks.PreToolUse[0].secretEnv: must be a non-empty"),
    ("secret type", one(secretEnv=1), {}, "hooks.PreToolUse[0].secretEnv: must be a non-empty"),
    (
        "secret name",
        one(secretEnv="A-B"),
        {},
        "hooks.PreToolUse[0].secretEnv: must be an environment variable name",
    ),
]


@pytest.mark.parametrize(
    ("doc", "kwargs", "expected"),
    [case[1:] for case in INVALID],
    ids=[case[0] for case in INVALID],
)
def test_invalid_documents_name_the_path(doc: Any, kwargs: dict[str, Any], expected: str) -> None:
    assert error_of(doc, **kwargs).startswith(expected)


def test_duplicate_handler_id_within_event() -> None:
    doc = {"version": 1, "hooks": {"PreToolUse": [handler(id="x"), handler(id="x")]}}
    assert error_of(doc) == 'hooks.PreToolUse[1].id: duplicate handler id "x"'


def test_config_error_is_a_value_error() -> None:
    assert issubclass(HookConfigError, ValueError)


def test_later_handler_errors_carry_their_index() -> None:
    doc = {
        "version": 1,
        "hooks": {"Stop": [handler(id="a"), handler(id="b", url="https://nope.example/")]},
    }
    assert error_of(doc).startswith('hooks.Stop[1].url: host "nope.example" is not in')
