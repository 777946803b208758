"""Reflection policy (SPEC §8.2): the closed decision set and the built-in `rules` reflector.

The HTTP reflector's wire contract and its configuration are the edge's: infra/reflector.py.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, NoReturn, Protocol

from domain.hook_config import HookHandler
from domain.learned_target import KEY_PATTERN, PROPOSAL_LIMIT_BYTES
from domain.task_policy import truncate_utf8

STRATEGIES = ("none", "overlay", "skill", "fact")
# The policy switch each strategy needs besides `evolution` (the global one).
STRATEGY_POLICY = {"overlay": "evolution", "skill": "skill_creation", "fact": "fact_retention"}
DEFAULT_OVERLAY_KEY = "instructions"


class ReflectionFailed(Exception):
    """The reflector gave no usable decision; the attempt fails and backs off."""


@dataclass(frozen=True)
class SignalEvidence:
    """What a reflector sees of a signal (already redacted and bounded)."""

    id: str
    agent_id: str
    trace_id: str
    kind: str
    goal: str
    outcome: str | None
    failure: str | None
    failure_class: str | None


@dataclass(frozen=True)
class Decision:
    """One decision from the closed set; `key`/`content` only for mutating strategies."""

    strategy: str
    key: str | None = None
    content: str | None = None

    @property
    def mutates(self) -> bool:
        return self.strategy != "none"


class Reflector(Protocol):
    """Decides what, if anything, a signal teaches; raises ReflectionFailed when it cannot."""

    def reflect(self, signal: SignalEvidence, targets: list[dict[str, Any]]) -> Decision: ...


def check_decision(strategy: Any, key: Any, content: Any) -> Decision:
    """Validate a decision against the closed set, the key pattern and the content cap."""
    if strategy not in STRATEGIES:
        _failed(f"strategy must be one of {', '.join(STRATEGIES)}")
    if strategy == "none":
        if key is not None or content is not None:
            _failed('strategy "none" takes no key and no content')
        return Decision("none")
    if strategy == "overlay" and key is None:
        key = DEFAULT_OVERLAY_KEY
    if not isinstance(key, str) or not KEY_PATTERN.fullmatch(key):
        _failed("key must match [a-z0-9][a-z0-9.-]{0,62}")
    if not isinstance(content, str) or not content.strip():
        _failed(f'strategy "{strategy}" needs a non-empty content string')
    if len(content.encode("utf-8")) > PROPOSAL_LIMIT_BYTES:
        _failed("content is over 4 KiB")
    return Decision(strategy, key, content)


def _failed(message: str) -> NoReturn:
    raise ReflectionFailed(message)


@dataclass(frozen=True)
class ReflectorConfig:
    """`rules`, or an HTTP reflector described like a hook handler."""

    kind: str
    handler: HookHandler | None = None

    @property
    def secret_env(self) -> str | None:
        return self.handler.secret_env if self.handler else None


# The built-in reflector


def _first_line(text: str | None, limit: int) -> str:
    line = next((part.strip() for part in (text or "").splitlines() if part.strip()), "")
    return truncate_utf8(line, limit)


def _slug(text: str) -> str:
    words = re.sub(r"[^a-z0-9]+", " ", text.lower()).split()[:6]
    return "-".join(words)[:48].strip("-")


class RulesReflector:
    """Deterministic and offline: failures teach an overlay lesson, outcomes a skill."""

    def reflect(self, signal: SignalEvidence, targets: list[dict[str, Any]]) -> Decision:
        goal = _first_line(signal.goal, 200) or "(no goal given)"
        if signal.kind == "failure" and (signal.failure or signal.failure_class):
            failure_class = signal.failure_class or "unknown"
            detail = _first_line(signal.failure, 1024) or "no details"
            lesson = (
                f'Earlier work on "{goal}" failed ({failure_class}): {detail}. '
                "Check for this before reporting success."
            )
            return check_decision("overlay", DEFAULT_OVERLAY_KEY, truncate_utf8(lesson, 2048))
        if signal.kind == "outcome" and signal.outcome and signal.outcome.strip():
            key = _slug(goal) or "skill"
            how = truncate_utf8(signal.outcome.strip(), 3 * 1024)
            return check_decision("skill", key, f"Goal: {goal}\nWhat worked:\n{how}")
        return Decision("none")
