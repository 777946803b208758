"""Reflection policy (SPEC §8.2): the closed decision set, the built-in `rules` reflector,
the HTTP reflector's strict request/response contract and its configuration."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, NoReturn, Protocol

from domain.hook_config import HookConfigError, HookHandler, check_outbound_url
from domain.learned_target import KEY_PATTERN, PROPOSAL_LIMIT_BYTES
from domain.strict_json import StrictJSONError, strict_json_object
from domain.task_policy import truncate_utf8

STRATEGIES = ("none", "overlay", "skill", "fact")
# The policy switch each strategy needs besides `evolution` (the global one).
STRATEGY_POLICY = {"overlay": "evolution", "skill": "skill_creation", "fact": "fact_retention"}
DEFAULT_OVERLAY_KEY = "instructions"
ANSWER_BODY_CAP = 64 * 1024
DEFAULT_REFLECTOR_TIMEOUT_MS = 10_000
MAX_REFLECTOR_TIMEOUT_MS = 30_000

_ANSWER_KEYS = frozenset({"schemaVersion", "strategy", "key", "content"})
_CONFIG_KEYS = frozenset({"type", "url", "timeoutMs", "secretEnv"})
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class ReflectionFailed(Exception):
    """The reflector gave no usable decision; the attempt fails and backs off."""


class ReflectorConfigError(ValueError):
    """A TACHOGRAPH_REFLECTOR value that must refuse start-up."""


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

    def wire(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "agentId": self.agent_id,
            "traceId": self.trace_id,
            "kind": self.kind,
            "goal": self.goal,
            "outcome": self.outcome,
            "failure": self.failure,
            "failureClass": self.failure_class,
        }


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


# The HTTP reflector's contract


def reflection_request_body(signal: SignalEvidence, targets: list[dict[str, Any]]) -> bytes:
    """`{schemaVersion: 1, signal, targets}` as compact UTF-8 JSON."""
    payload = {"schemaVersion": 1, "signal": signal.wire(), "targets": targets}
    text = json.dumps(payload, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return text.encode("utf-8")


def parse_reflector_answer(status: int | None, body: bytes | None) -> Decision:
    """Strict `{schemaVersion: 1, strategy, key?, content?}`; anything else raises."""
    if status is None or not 200 <= status <= 299:
        _failed(f"reflector answered HTTP status {status}")
    if not body:
        _failed("reflector answer is empty")
    if len(body) > ANSWER_BODY_CAP:
        _failed("reflector answer is over 64 KiB")
    try:
        obj = strict_json_object(body)
    except StrictJSONError as exc:
        _failed(f"reflector answer {exc}")
    if set(obj) - _ANSWER_KEYS:
        _failed("reflector answer has unknown keys")
    version = obj.get("schemaVersion")
    if type(version) is not int or version != 1:
        _failed("reflector answer schemaVersion must be 1")
    if not isinstance(obj.get("strategy"), str):
        _failed("reflector answer strategy must be a string")
    return check_decision(obj["strategy"], obj.get("key"), obj.get("content"))


@dataclass(frozen=True)
class ReflectorConfig:
    """`rules`, or an HTTP reflector described like a hook handler."""

    kind: str
    handler: HookHandler | None = None

    @property
    def secret_env(self) -> str | None:
        return self.handler.secret_env if self.handler else None


def parse_reflector_config(
    raw: str | None, *, allowed_hosts: frozenset[str], allow_insecure_loopback: bool
) -> ReflectorConfig:
    """`rules` (default) or `{"type": "http", "url", "timeoutMs"?, "secretEnv"?}`."""
    if raw is None or raw.strip() in ("", "rules"):
        return ReflectorConfig("rules")
    try:
        obj = json.loads(raw)
    except json.JSONDecodeError:
        raise ReflectorConfigError('must be "rules" or a JSON object') from None
    if not isinstance(obj, dict):
        raise ReflectorConfigError('must be "rules" or a JSON object')
    unknown = sorted(set(obj) - _CONFIG_KEYS)
    if unknown:
        raise ReflectorConfigError(f"{unknown[0]}: unknown key")
    if obj.get("type") != "http":
        raise ReflectorConfigError('type: must be "http"')
    try:
        url = check_outbound_url(
            obj.get("url"),
            "url",
            allowed_hosts=allowed_hosts,
            allow_insecure_loopback=allow_insecure_loopback,
        )
    except HookConfigError as exc:
        raise ReflectorConfigError(str(exc)) from None
    timeout = obj.get("timeoutMs", DEFAULT_REFLECTOR_TIMEOUT_MS)
    if type(timeout) is not int or not 1 <= timeout <= MAX_REFLECTOR_TIMEOUT_MS:
        raise ReflectorConfigError(
            f"timeoutMs: must be an integer from 1 to {MAX_REFLECTOR_TIMEOUT_MS}"
        )
    secret_env = obj.get("secretEnv")
    if secret_env is not None and (
        not isinstance(secret_env, str) or not _ENV_NAME.fullmatch(secret_env)
    ):
        raise ReflectorConfigError("secretEnv: must be an environment variable name")
    handler = HookHandler(
        id="reflector",
        event="Reflection",
        url=url,
        matcher=None,
        timeout_ms=timeout,
        failure_mode="closed",
        secret_env=secret_env,
    )
    return ReflectorConfig("http", handler)


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
