"""The HTTP reflector: the hook transport (URL rules, caps, deadline, signing) plus the
strict reflection contract of SPEC §8.2."""

from __future__ import annotations

from typing import Any

from domain.hook_config import HookHandler
from domain.reflection import (
    Decision,
    ReflectionFailed,
    Reflector,
    ReflectorConfig,
    RulesReflector,
    SignalEvidence,
    parse_reflector_answer,
    reflection_request_body,
)
from infra.hook_wire import HookTransport


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
