"""Strict parsing of `TACHOGRAPH_APPROVALS`, the code-free approval rules.

`{"version": 1, "rules": [{"id", "tool", "match"?, "workspaceId"?, "timeoutS"?,
"onTimeout"?}]}`. Like TACHOGRAPH_HOOKS, a bad document refuses start-up with one
message naming the JSON path: unknown keys, a regular expression that does not compile,
a duplicate id, a timeout beyond what any runtime waits for a hook.
"""

from __future__ import annotations

import re
from typing import Any

from domain.approval_rules import (
    DEFAULT_TIMEOUT_S,
    MAX_TIMEOUT_S,
    ON_TIMEOUT,
    ApprovalRule,
    ApprovalRules,
)
from infra.hook_config_parser import HookConfigError, _check_version, _fail, _load, _object

_TOP_LEVEL_KEYS = frozenset({"version", "rules"})
_RULE_KEYS = frozenset({"id", "tool", "match", "workspaceId", "timeoutS", "onTimeout"})
_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}")


class ApprovalConfigError(HookConfigError):
    """A TACHOGRAPH_APPROVALS document that must refuse start-up; message starts with the
    path."""


def parse_approval_rules(raw: str | None) -> ApprovalRules:
    """Validate a TACHOGRAPH_APPROVALS document; None or empty means no rules."""
    if raw is None or not raw.strip():
        return ApprovalRules()
    try:
        document = _object(_load(raw), "", _TOP_LEVEL_KEYS)
        _check_version(document)
        entries = document.get("rules", [])
        if not isinstance(entries, list):
            _fail("rules", "must be a list")
        rules: list[ApprovalRule] = []
        for index, entry in enumerate(entries):
            rule = _rule(entry, f"rules[{index}]")
            if any(r.id == rule.id for r in rules):
                _fail(f"rules[{index}].id", f"duplicate id {rule.id!r}")
            rules.append(rule)
    except HookConfigError as exc:
        raise ApprovalConfigError(str(exc)) from None
    return ApprovalRules(tuple(rules))


def _rule(entry: Any, path: str) -> ApprovalRule:
    rule = _object(entry, path, _RULE_KEYS)
    for key in ("id", "tool"):
        if key not in rule:
            _fail(f"{path}.{key}", "required")
    rule_id = _text(rule["id"], f"{path}.id")
    if not _ID.fullmatch(rule_id):
        _fail(f"{path}.id", "must be 1-64 letters, digits, '_', '.', ':' or '-'")
    tool = _text(rule["tool"], f"{path}.tool")
    match = None
    if "match" in rule:
        pattern = _text(rule["match"], f"{path}.match")
        try:
            match = re.compile(pattern)
        except re.error as exc:
            _fail(f"{path}.match", f"not a valid regular expression: {exc}")
    workspace = _text(rule["workspaceId"], f"{path}.workspaceId") if "workspaceId" in rule else None
    timeout = rule.get("timeoutS", DEFAULT_TIMEOUT_S)
    if type(timeout) is not int or not 1 <= timeout <= MAX_TIMEOUT_S:
        _fail(f"{path}.timeoutS", f"must be an integer from 1 to {MAX_TIMEOUT_S}")
    on_timeout = rule.get("onTimeout", "deny")
    if on_timeout not in ON_TIMEOUT:
        _fail(f"{path}.onTimeout", f"must be one of {', '.join(ON_TIMEOUT)}")
    return ApprovalRule(rule_id, tool, match, workspace, timeout, on_timeout)


def _text(value: Any, path: str) -> str:
    if not isinstance(value, str) or not value.strip():
        _fail(path, "must be a non-empty string")
    return value
