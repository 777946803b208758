"""Upcasting stored event state to the current version of its class (SPEC §3).

The aggregates are upcast by the library's mapper; read models decode the stored
state themselves (no aggregate is rebuilt), so they upcast through here, with the
same `upcast_vN_vN+1` methods the event classes declare.
"""

from __future__ import annotations

from typing import Any

from eventsourcing.utils import resolve_topic

_VERSIONS: dict[str, tuple[type, int] | None] = {}


def upcast_state(topic: str, state: dict[str, Any]) -> dict[str, Any]:
    """`state` of an event stored under `topic`, in its class's current version (in place)."""
    if topic in _VERSIONS:
        known = _VERSIONS[topic]
    else:
        known = _VERSIONS[topic] = _version_of(topic)
    if known is None:
        return state
    cls, current = known
    version = state.pop("class_version", 1)
    while version < current:
        getattr(cls, f"upcast_v{version}_v{version + 1}")(state)
        version += 1
    return state


def _version_of(topic: str) -> tuple[type, int] | None:
    try:
        cls = resolve_topic(topic)
    except Exception:  # noqa: BLE001 - a topic no class answers to is read as stored
        return None
    current = getattr(cls, "class_version", 1)
    return (cls, current) if isinstance(current, int) and current > 1 else None
