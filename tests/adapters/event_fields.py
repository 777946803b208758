"""LifecycleEvents and Decisions under the field names of SPEC §6.3, for adapters' tests."""

from __future__ import annotations

from dataclasses import fields
from typing import Any

from domain.casing import to_camel
from domain.hook_dispatch import Decision
from domain.lifecycle import REPORTED_FIELDS, LifecycleEvent


def wire_fields(ev: LifecycleEvent) -> dict[str, Any]:
    """Set fields by their §6.3 names, as a handler sees them; `detail` always (as the
    adapters always set it)."""
    view: dict[str, Any] = {}
    detail = dict(ev.detail)
    for field in fields(ev):
        value = getattr(ev, field.name)
        if field.name in REPORTED_FIELDS:  # handlers get these in `detail`
            if value is not None:
                detail[to_camel(field.name)] = value
        elif field.name != "detail" and value is not None:
            view[to_camel(field.name)] = value
    view["detail"] = detail
    return view


def decision_of(wire: dict[str, Any]) -> Decision:
    """A decision written as its §6.3 wire fields (absent outcome: pass)."""
    return Decision(
        wire.get("outcome", "pass"),
        wire.get("reason"),
        wire.get("additionalContext"),
        wire.get("replacement"),
    )
