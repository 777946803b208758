"""The one inbound shape: a lifecycle event of an agent runtime, in Tachograph's vocabulary.

Every runtime adapter (Claude Code over HTTP or a command hook, Coder, the generic
`POST /api/sessions/{id}/events`) maps its wire body into a `LifecycleEvent` exactly
once; nothing after the adapter knows which runtime or casing it came from.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from typing import Any, Final
from uuid import UUID, uuid5

from domain.ids import PROJECT_NAMESPACE

EVENT_NAME_PATTERN: Final = r"^[A-Za-z][A-Za-z0-9_]{0,63}$"
# Ids, names and labels (not tool inputs or prompts, which are bounded by the body cap).
SHORT_TEXT_MAX: Final = 256

_EVENT_NAME: Final = re.compile(EVENT_NAME_PATTERN)
_SHORT_FIELDS: Final = (
    "event_id",
    "turn_id",
    "agent",
    "agent_session_id",
    "tool_name",
    "tool_call_id",
    "subagent_id",
    "model",
)


# What the runtime reports about the call, typed in the event; managed handlers receive
# them inside `detail`, as before they were typed (infra/hook_wire.py).
REPORTED_FIELDS: Final = (
    "cwd",
    "permission_mode",
    "agent_type",
    "duration_ms",
    "error",
    "is_interrupt",
)


class InvalidEvent(ValueError):
    """A lifecycle event breaks a limit; `field` names it as the runtime-neutral field."""

    def __init__(self, field_name: str, problem: str) -> None:
        super().__init__(f"{field_name}: {problem}")
        self.field = field_name
        self.problem = problem


@dataclass(frozen=True, slots=True)
class LifecycleEvent:
    """One occurrence of a lifecycle event; absent fields are None.

    `detail` holds what the runtime sent beyond these fields, as the runtime's adapter
    named it; it reaches managed handlers but is never stored.
    """

    event: str
    event_id: str | None = None
    turn_id: str | None = None
    agent: str | None = None
    agent_session_id: str | None = None
    tool_name: str | None = None
    tool_call_id: str | None = None
    tool_input: Any = None
    tool_response: Any = None
    prompt: str | None = None
    last_assistant_message: str | None = None
    subagent_id: str | None = None
    model: str | None = None
    # Facts of the call the runtime reports (domain/dispatch_facts.py bounds them).
    cwd: str | None = None
    permission_mode: str | None = None
    agent_type: str | None = None
    duration_ms: int | None = None
    error: str | None = None
    is_interrupt: bool | None = None
    detail: dict[str, Any] = field(default_factory=dict)
    # The W3C `traceparent` the runtime sent with the call: the decision's exported span
    # is its child (infra/decision_export.py). Never stored, never shown to handlers.
    trace_parent: str | None = None


def check_event(event: LifecycleEvent) -> LifecycleEvent:
    """The event, if it keeps SPEC §6.3's limits; raises InvalidEvent naming the field."""
    if not _EVENT_NAME.match(event.event):
        raise InvalidEvent("event", f"must match {EVENT_NAME_PATTERN}")
    for name in _SHORT_FIELDS:
        value = getattr(event, name)
        if value is None:
            continue
        if not isinstance(value, str):
            raise InvalidEvent(name, "must be a string")
        if len(value) > SHORT_TEXT_MAX:
            raise InvalidEvent(name, f"must be at most {SHORT_TEXT_MAX} characters")
    if event.event_id == "":
        raise InvalidEvent("event_id", "must not be empty")
    for name in (
        "prompt",
        "last_assistant_message",
        "cwd",
        "permission_mode",
        "agent_type",
        "error",
    ):
        value = getattr(event, name)
        if value is not None and not isinstance(value, str):
            raise InvalidEvent(name, "must be a string")
    if event.duration_ms is not None and (
        type(event.duration_ms) is not int or event.duration_ms < 0
    ):
        raise InvalidEvent("duration_ms", "must be a non-negative integer")
    if event.is_interrupt is not None and type(event.is_interrupt) is not bool:
        raise InvalidEvent("is_interrupt", "must be a boolean")
    return event


# Every hook of a session asks again: a hash and a UUID built per request are worth keeping.
@functools.lru_cache(maxsize=4096)
def agent_session_uuid(key: str) -> UUID:
    """UUIDv5 of "<agent>:<agentSessionId>" (or "coder:<chatId>") in the project namespace."""
    return uuid5(PROJECT_NAMESPACE, key)
