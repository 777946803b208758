"""Reflection policy (SPEC §8.2): the closed decision set and the built-in `rules` reflector.

The HTTP reflector's wire contract and its configuration are the edge's: infra/reflector.py.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Any, NoReturn, Protocol

from domain.hook_config import HookHandler
from domain.learned_target import KEY_PATTERN, PROPOSAL_LIMIT_BYTES, learned_target_id
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
    # The turn the evidence comes from, and the learned targets (their ids) it had
    # already received: a lesson the turn had is not learned again from it.
    turn_id: str | None = None
    received: tuple[str, ...] = ()
    # Where the evidence arose: the lessons it teaches are that workspace's targets.
    workspace_id: str | None = None


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

LESSON_KEY_PREFIX = "lesson."
# What varies between two occurrences of one failure: replaced before patterns are compared.
_URL = re.compile(r"\b[a-z][a-z0-9+.-]*://\S+", re.IGNORECASE)
_QUOTED = re.compile(
    r"(?<![\w])'[^'\n]*'(?![\w])|\"[^\"\n]*\"|`[^`\n]*`|\u201c[^\u201d\n]*\u201d|\u2018[^\u2019\n]*\u2019"
)
_PATH = re.compile(r"[\w.@+~%-]*[\\/][\w.@+~%\\/-]*")
_UUID = re.compile(r"\b[0-9a-f]{8}(?:-[0-9a-f]{4}){3}-[0-9a-f]{12}\b", re.IGNORECASE)
_HEX = re.compile(
    r"\b(?:0x[0-9a-f]+|(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{6,})\b", re.IGNORECASE
)
# A number, with a unit when one is glued to it ("30s", "512MiB").
_NUMBER = re.compile(r"\b\d+(?:[.,:]\d+)*[a-z]{0,3}\b", re.IGNORECASE)
_PLACEHOLDERS = {"url", "str", "path", "id", "n"}
# A Python traceback opens with this line; what failed is said on its last line.
_TRACEBACK = "traceback (most recent call last)"
_SLUG_BYTES = 56 - 9  # key ≤ 63 = prefix (7) + slug + "-" + 8 hex digits of the hash


def _first_line(text: str | None, limit: int) -> str:
    line = next((part.strip() for part in (text or "").splitlines() if part.strip()), "")
    return truncate_utf8(line, limit)


def _slug(text: str) -> str:
    words = re.sub(r"[^a-z0-9]+", " ", text.lower()).split()[:6]
    return "-".join(words)[:48].strip("-")


def telling_text(failure: str | None) -> str:
    """The part of a failure's detail that says what went wrong: its first two lines (a
    shell tool's first line is often only "Exit code 3", its stderr comes next), or the
    last line of a Python traceback."""
    lines = [part.strip() for part in (failure or "").splitlines() if part.strip()]
    if lines and lines[0].lower().startswith(_TRACEBACK) and len(lines) > 1:
        return lines[-1]
    return " / ".join(lines[:2])


def failure_signature(failure_class: str | None, failure: str | None) -> str:
    """What makes two failures the same pattern: their class and their detail's telling text,
    with URLs, quoted strings, paths, ids and numbers replaced by placeholders."""
    line = telling_text(failure)[:512]
    for pattern, placeholder in (
        (_URL, "<url>"),
        (_QUOTED, "<str>"),
        (_PATH, "<path>"),
        (_UUID, "<id>"),
        (_HEX, "<id>"),
        (_NUMBER, "<n>"),
    ):
        line = pattern.sub(placeholder, line)
    detail = " ".join(line.lower().split())
    return f"{(failure_class or 'unknown').strip().lower()}: {detail}"


def lesson_key(failure_class: str | None, failure: str | None) -> str:
    """The overlay key of a failure pattern: `lesson.<class>-<words>-<hash>`, readable and
    unique per pattern (the hash tells apart patterns whose words are cut alike)."""
    signature = failure_signature(failure_class, failure)
    digest = hashlib.sha256(signature.encode()).hexdigest()[:8]
    class_part, _, detail = signature.partition(": ")
    class_words = re.sub(r"[^a-z0-9]+", " ", class_part).split()[:3]
    words = [
        w
        for w in re.sub(r"[^a-z0-9]+", " ", detail).split()
        if w not in _PLACEHOLDERS and w not in class_words
    ]
    slug = ""
    for word in [*class_words, *words]:
        candidate = f"{slug}-{word[:24]}" if slug else word[:24]
        if len(candidate) > _SLUG_BYTES:
            break
        slug = candidate
    return f"{LESSON_KEY_PREFIX}{slug or 'failure'}-{digest}"


def _has_lesson(targets: list[dict[str, Any]], key: str) -> bool:
    return any(
        t.get("kind") == "overlay" and t.get("key") == key and (t.get("content") or "").strip()
        for t in targets
    )


class RulesReflector:
    """Deterministic and offline: failures teach one overlay lesson per failure pattern,
    outcomes a skill."""

    def reflect(self, signal: SignalEvidence, targets: list[dict[str, Any]]) -> Decision:
        goal = _first_line(signal.goal, 200) or "(no goal given)"
        if signal.kind == "failure" and (signal.failure or signal.failure_class):
            key = lesson_key(signal.failure_class, signal.failure)
            # One lesson per pattern, and never from a turn that was already taught it: the
            # lesson did not prevent that failure, so the failure is no new evidence.
            if _has_lesson(targets, key):
                return Decision("none")
            target = learned_target_id("overlay", signal.agent_id, key, signal.workspace_id)
            if str(target) in signal.received:
                return Decision("none")
            failure_class = signal.failure_class or "unknown"
            detail = truncate_utf8(telling_text(signal.failure), 1024) or "no details"
            lesson = truncate_utf8(
                f'Earlier work on "{goal}" failed ({failure_class}): {detail}. '
                "Check for this before reporting success.",
                PROPOSAL_LIMIT_BYTES - 128,
            )
            return check_decision("overlay", key, f"{lesson} (evidence: signal {signal.id})")
        if signal.kind == "outcome" and signal.outcome and signal.outcome.strip():
            key = _slug(goal) or "skill"
            how = truncate_utf8(signal.outcome.strip(), 3 * 1024)
            return check_decision("skill", key, f"Goal: {goal}\nWhat worked:\n{how}")
        return Decision("none")
