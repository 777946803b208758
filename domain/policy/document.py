"""A policy document: rules as data, each a CEL expression over one call (docs/policy.md).

What a validated document means. Reading one from its source (JSON or YAML, its keys
as operators write them) is the edge's: infra/policy_document.py validates every field,
compiles every expression and tries it once against a sample call before anything is
recorded, so a recorded revision can always be evaluated. What compiles an expression
is the edge's too (infra/policy_cel.py); here a compiled expression only has the names
it reads and can be matched against a call's value.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Protocol

VERSION: Final = 1
OUTCOMES: Final = ("deny", "ask", "context")
# The strongest outcome decides: a deny before an ask before added context.
STRENGTH: Final = {"deny": 0, "ask": 1, "context": 2}
MODES: Final = ("enforce", "shadow")
# A rule whose expression fails at run time applies (fail closed), unless it says to be
# skipped; either way the failure is logged and counted, never a silent pass.
ON_ERROR: Final = ("apply", "skip")
DEFAULT_EVENTS: Final = ("PreToolUse", "PermissionRequest")
# Events on which `ask` can hold a call (the runtime waits before the call runs).
ASK_EVENTS: Final = frozenset(DEFAULT_EVENTS)
MAX_RULES: Final = 200
MAX_EXPRESSION: Final = 4_000
MAX_REASON: Final = 1_000


class CompiledExpression(Protocol):
    """An expression compiled once; `names` are the call's fields it reads."""

    source: str
    names: frozenset[str]

    def matches(self, activation: Any) -> bool:
        """True when the expression holds for the call; raises when it cannot be evaluated."""


class Compiler(Protocol):
    """Compiles expressions and turns a call's value into what they are evaluated on."""

    def compile(self, expression: str) -> CompiledExpression:
        """The compiled expression; ValueError naming the problem when it does not compile."""

    def activation(self, value: Mapping[str, Any]) -> Any:
        """The call's value as the compiled expressions read it (built once per call)."""

    def together(self, expressions: Sequence[CompiledExpression]) -> CompiledTogether:
        """Several expressions evaluated in one pass (a backtest's hot loop)."""


class CompiledTogether(Protocol):
    """Expressions evaluated in one pass over an activation."""

    def each(self, activation: Any) -> tuple[bool, ...] | None:
        """Each expression's result, in order; None when any of them failed or gave
        something other than a boolean (then each is evaluated alone, as one rule)."""


class NotBoolean(TypeError):
    """An expression that gave something other than true or false."""


class PolicyInvalid(ValueError):
    """A document that cannot be recorded: which rule (None: the document) and why."""

    def __init__(self, rule_id: str | None, problem: str) -> None:
        where = f"rule {rule_id!r}: " if rule_id is not None else ""
        super().__init__(f"{where}{problem}")
        self.rule_id = rule_id
        self.problem = problem


@dataclass(frozen=True)
class PolicyRule:
    id: str
    on: frozenset[str]
    when: str
    then: str
    reason: str | None
    context: str | None
    timeout_s: int
    on_timeout: str
    mode: str
    on_error: str
    expression: CompiledExpression

    @property
    def shadow(self) -> bool:
        return self.mode == "shadow"


@dataclass(frozen=True)
class PolicyDocument:
    """A validated document: its rules in order, and what its evaluation needs."""

    rules: tuple[PolicyRule, ...]
    mode: str
    # The call fields any rule on an event reads (the rest of the value is not built).
    names_by_event: Mapping[str, frozenset[str]]

    def rules_on(self, event: str) -> tuple[PolicyRule, ...]:
        return tuple(rule for rule in self.rules if event in rule.on)

    @property
    def longest_hold_s(self) -> int:
        return max((r.timeout_s for r in self.rules if r.then == "ask" and not r.shadow), default=0)


def digest(source: str) -> str:
    """The SHA-256 of a document's source text, as recorded beside it."""
    return hashlib.sha256(source.encode("utf-8")).hexdigest()
