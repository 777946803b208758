"""The HTTP reflector: the hook transport (URL rules, caps, deadline, signing) plus the
strict reflection contract of SPEC §8.2, with its camelCase wire and configuration."""

from __future__ import annotations

import json
from typing import Any, NoReturn

from domain.hook_config import HookHandler
from domain.reflection import (
    Decision,
    ReflectionFailed,
    Reflector,
    ReflectorConfig,
    RulesReflector,
    SignalEvidence,
    check_decision,
)
from domain.strict_json import StrictJSONError, strict_json_object
from infra.hook_config_parser import ENV_NAME, HookConfigError, check_outbound_url
from infra.hook_wire import HookTransport

ANSWER_BODY_CAP = 64 * 1024
DEFAULT_REFLECTOR_TIMEOUT_MS = 10_000
MAX_REFLECTOR_TIMEOUT_MS = 30_000

_ANSWER_KEYS = frozenset({"schemaVersion", "strategy", "key", "content"})
_CONFIG_KEYS = frozenset({"type", "url", "timeoutMs", "secretEnv"})


class ReflectorConfigError(ValueError):
    """A TACHOGRAPH_REFLECTOR value that must refuse start-up."""


def _failed(message: str) -> NoReturn:
    raise ReflectionFailed(message)


def signal_wire(signal: SignalEvidence) -> dict[str, Any]:
    """The signal as the reflector receives it."""
    return {
        "id": signal.id,
        "agentId": signal.agent_id,
        "traceId": signal.trace_id,
        "kind": signal.kind,
        "goal": signal.goal,
        "outcome": signal.outcome,
        "failure": signal.failure,
        "failureClass": signal.failure_class,
    }


def reflection_request_body(signal: SignalEvidence, targets: list[dict[str, Any]]) -> bytes:
    """`{schemaVersion: 1, signal, targets}` as compact UTF-8 JSON."""
    payload = {"schemaVersion": 1, "signal": signal_wire(signal), "targets": targets}
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
        not isinstance(secret_env, str) or not ENV_NAME.fullmatch(secret_env)
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


class HttpReflector:
    """POSTs `{schemaVersion, signal, targets}`; any transport failure or bad answer raises."""

    def __init__(self, handler: HookHandler, transport: HookTransport) -> None:
        self.handler = handler
        self.transport = transport

    def reflect(self, signal: SignalEvidence, targets: list[dict[str, Any]]) -> Decision:
        reply = self.transport.call(self.handler, reflection_request_body(signal, targets))
        if reply.failure is not None:
            raise ReflectionFailed(f"request failed ({reply.failure})")
        return parse_reflector_answer(reply.status, reply.body)


def build_reflector(config: ReflectorConfig, transport: HookTransport) -> Reflector:
    """The configured reflector (`rules` needs no transport)."""
    if config.handler is None:
        return RulesReflector()
    return HttpReflector(config.handler, transport)
