"""Code-free approval rules (`TACHOGRAPH_APPROVALS`): which tool calls wait for a person.

Parsing the document is the edge's (infra/approval_config_parser.py); here is what a
parsed rule means.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Final

# The events a tool call can be held on: the runtime asks before the call runs.
APPROVAL_EVENTS: Final = frozenset({"PreToolUse", "PermissionRequest"})
DEFAULT_TIMEOUT_S: Final = 120
# Where a managed handler may answer `ask` (domain/lifecycle_events.py EVENT_OUTCOMES).
ASKING_EVENTS: Final = frozenset({"PreToolUse"})
# Claude Code waits up to 600 s for a command hook by default; no runtime waits longer.
MAX_TIMEOUT_S: Final = 600
ON_TIMEOUT: Final = ("deny", "allow")


@dataclass(frozen=True)
class ApprovalRule:
    """A tool name, an optional pattern over the input summary, and how long to wait."""

    id: str
    tool: str
    match: re.Pattern[str] | None
    workspace_id: str | None
    timeout_s: int
    on_timeout: str

    def applies(self, tool_name: str | None, summary: str | None, workspace: str) -> bool:
        if tool_name != self.tool:
            return False
        if self.workspace_id is not None and workspace != self.workspace_id:
            return False
        return self.match is None or (summary is not None and bool(self.match.search(summary)))


@dataclass(frozen=True)
class ApprovalRules:
    """Rules in declaration order; the first that applies holds the call."""

    rules: tuple[ApprovalRule, ...] = ()
    # Looked up on every tool call: most tools have no rule, and say so at once.
    tools: frozenset[str] = field(init=False, default=frozenset())
    # Only then does a call's workspace need looking up.
    per_workspace: bool = field(init=False, default=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "tools", frozenset(rule.tool for rule in self.rules))
        scoped = any(rule.workspace_id is not None for rule in self.rules)
        object.__setattr__(self, "per_workspace", scoped)

    def first(
        self, tool_name: str | None, summary: str | None, workspace: str
    ) -> ApprovalRule | None:
        if tool_name not in self.tools:
            return None
        return next((r for r in self.rules if r.applies(tool_name, summary, workspace)), None)

    def may_hold(self, event: str, tool_name: str | None) -> bool:
        """Whether a call could be held at all (without looking at its input)."""
        return event in APPROVAL_EVENTS and tool_name in self.tools


def longest_hold_s(rules: ApprovalRules, handler_events: Iterable[str]) -> int:
    """The longest a hook request can be held on this server, in seconds (0: never).

    A rule holds a call for its `timeoutS`; a handler on PreToolUse may answer `ask`,
    which holds the call for DEFAULT_TIMEOUT_S. Hooks must wait at least this long, or
    a runtime stops waiting before the decision (`tachograph hook install` reads it
    from `GET /api/health` as `longestHoldS`).
    """
    holds = [rule.timeout_s for rule in rules.rules]
    if any(event in ASKING_EVENTS for event in handler_events):
        holds.append(DEFAULT_TIMEOUT_S)
    return max(holds, default=0)
