"""Reading a policy document: every field of the source checked, every expression
compiled and tried once, before anything is recorded (docs/policy.md lists the fields).

A problem is a PolicyInvalid naming the rule and what is wrong with it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any, Final

from domain.approval_rules import DEFAULT_TIMEOUT_S, MAX_TIMEOUT_S, ON_TIMEOUT
from domain.hook_dispatch import CONTEXT_CAP
from domain.lifecycle import EVENT_NAME_PATTERN
from domain.policy.document import (
    ASK_EVENTS,
    DEFAULT_EVENTS,
    MAX_EXPRESSION,
    MAX_REASON,
    MAX_RULES,
    MODES,
    ON_ERROR,
    OUTCOMES,
    VERSION,
    CompiledExpression,
    Compiler,
    NotBoolean,
    PolicyDocument,
    PolicyInvalid,
    PolicyRule,
)
from domain.policy.value import NAMES, sample_value

_RULE_ID: Final = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
_EVENT: Final = re.compile(EVENT_NAME_PATTERN)
_DOCUMENT_KEYS: Final = frozenset({"version", "rules", "mode", "description"})
_RULE_KEYS: Final = frozenset(
    {"id", "on", "when", "then", "reason", "context", "timeoutS", "onTimeout", "mode", "onError"}
)


def parse_policy(data: object, compiler: Compiler) -> PolicyDocument:
    """The document `data` (parsed JSON or YAML) describes; PolicyInvalid otherwise."""
    if not isinstance(data, Mapping):
        raise PolicyInvalid(None, "the document must be an object with `version` and `rules`")
    unknown = sorted(set(map(str, data)) - _DOCUMENT_KEYS)
    if unknown:
        raise PolicyInvalid(None, f"unknown field {unknown[0]!r}")
    if data.get("version") != VERSION or isinstance(data.get("version"), bool):
        raise PolicyInvalid(None, f"`version` must be {VERSION}")
    mode = _choice(None, data, "mode", MODES, "enforce")
    rules = data.get("rules")
    if not isinstance(rules, list):
        raise PolicyInvalid(None, "`rules` must be a list")
    if len(rules) > MAX_RULES:
        raise PolicyInvalid(None, f"at most {MAX_RULES} rules")
    parsed: list[PolicyRule] = []
    seen: set[str] = set()
    for index, raw in enumerate(rules):
        rule = _rule(index, raw, mode, compiler)
        if rule.id in seen:
            raise PolicyInvalid(rule.id, "the id is used by an earlier rule")
        seen.add(rule.id)
        parsed.append(rule)
    events = {event for rule in parsed for event in rule.on}
    names = {
        e: frozenset().union(*(r.expression.names for r in parsed if e in r.on)) for e in events
    }
    return PolicyDocument(tuple(parsed), mode, names)


def _rule(index: int, raw: object, mode: str, compiler: Compiler) -> PolicyRule:
    if not isinstance(raw, Mapping):
        raise PolicyInvalid(None, f"rules[{index}] must be an object")
    rule_id = raw.get("id")
    if not isinstance(rule_id, str) or not _RULE_ID.match(rule_id):
        raise PolicyInvalid(
            None, f"rules[{index}].id must be 1-64 letters, digits, '.', '_' or '-'"
        )
    unknown = sorted(set(map(str, raw)) - _RULE_KEYS)
    if unknown:
        raise PolicyInvalid(rule_id, f"unknown field {unknown[0]!r}")
    then = _choice(rule_id, raw, "then", OUTCOMES, None)
    on = _events(rule_id, raw.get("on", list(DEFAULT_EVENTS)))
    if then == "ask" and not on <= ASK_EVENTS:
        raise PolicyInvalid(rule_id, "`ask` holds a call only on PreToolUse or PermissionRequest")
    reason = _text(rule_id, raw, "reason", MAX_REASON)
    context = _text(rule_id, raw, "context", CONTEXT_CAP)
    if then == "context" and not context:
        raise PolicyInvalid(rule_id, "`then: context` needs the `context` text to add")
    if then != "context" and context is not None:
        raise PolicyInvalid(rule_id, "`context` is only for `then: context`")
    if then != "ask" and ("timeoutS" in raw or "onTimeout" in raw):
        raise PolicyInvalid(rule_id, "`timeoutS` and `onTimeout` are only for `then: ask`")
    timeout_s = raw.get("timeoutS", DEFAULT_TIMEOUT_S)
    if isinstance(timeout_s, bool) or not isinstance(timeout_s, int):
        raise PolicyInvalid(rule_id, "`timeoutS` must be a whole number of seconds")
    if not 1 <= timeout_s <= MAX_TIMEOUT_S:
        raise PolicyInvalid(rule_id, f"`timeoutS` must be between 1 and {MAX_TIMEOUT_S}")
    return PolicyRule(
        id=rule_id,
        on=on,
        when=_when(rule_id, raw.get("when")),
        then=then,
        reason=reason,
        context=context,
        timeout_s=timeout_s,
        on_timeout=_choice(rule_id, raw, "onTimeout", ON_TIMEOUT, "deny"),
        mode=_choice(rule_id, raw, "mode", MODES, mode),
        on_error=_choice(rule_id, raw, "onError", ON_ERROR, "apply"),
        expression=_compiled(rule_id, raw.get("when"), compiler),
    )


def _when(rule_id: str, when: object) -> str:
    if not isinstance(when, str) or not when.strip():
        raise PolicyInvalid(rule_id, "`when` must be a CEL expression")
    if len(when) > MAX_EXPRESSION:
        raise PolicyInvalid(rule_id, f"`when` must be at most {MAX_EXPRESSION} characters")
    return when


def _compiled(rule_id: str, when: object, compiler: Compiler) -> CompiledExpression:
    assert isinstance(when, str)
    try:
        expression = compiler.compile(when)
    except ValueError as exc:
        raise PolicyInvalid(rule_id, f"`when` does not compile: {exc}") from None
    try:
        unknown = sorted(_unknown_names(expression, compiler))
    except PolicyInvalid as exc:
        raise PolicyInvalid(rule_id, f"`when` must give true or false: {exc.problem}") from None
    if unknown:
        known = ", ".join(NAMES)
        raise PolicyInvalid(rule_id, f"`when` reads {unknown[0]!r}, which is not one of {known}")
    return expression


def _unknown_names(expression: CompiledExpression, compiler: Compiler) -> set[str]:
    """Names a sample call does not define: tried once, so a typo is caught when the
    revision is recorded, not on the first call it would have judged."""
    try:
        expression.matches(compiler.activation(sample_value()))
    except NameError as exc:
        return {str(exc.name or exc)}
    except NotBoolean as exc:
        raise PolicyInvalid(None, str(exc)) from None
    except Exception:  # noqa: BLE001 - other run-time failures depend on the call
        return set()
    return set()


def _events(rule_id: str, on: object) -> frozenset[str]:
    if isinstance(on, str):
        on = [on]
    if not isinstance(on, list) or not on:
        raise PolicyInvalid(rule_id, "`on` must be a non-empty list of event names")
    for event in on:
        if not isinstance(event, str) or not _EVENT.match(event):
            raise PolicyInvalid(rule_id, f"`on` holds {event!r}, which is not an event name")
    return frozenset(on)


def _text(rule_id: str, raw: Mapping[str, Any], key: str, limit: int) -> str | None:
    value = raw.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise PolicyInvalid(rule_id, f"`{key}` must be text")
    if len(value.encode("utf-8")) > limit:
        raise PolicyInvalid(rule_id, f"`{key}` must be at most {limit} bytes")
    return value


def _choice(
    rule_id: str | None,
    raw: Mapping[str, Any],
    key: str,
    allowed: Sequence[str],
    default: str | None,
) -> str:
    value = raw.get(key, default)
    if value not in allowed:
        options = " | ".join(f'"{a}"' for a in allowed)
        raise PolicyInvalid(rule_id, f"`{key}` must be one of {options}")
    assert isinstance(value, str)
    return value
