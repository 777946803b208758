"""Shared aggregate base: explicit topics and versions, so the log outlives the code."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from eventsourcing.domain import Aggregate


class TachographAggregate(Aggregate):
    """Base of every aggregate; subclasses set TOPIC and topic= on each @event."""

    # Every subclass sets TOPIC and names its creation event "Created" with an explicit
    # topic: the library then needs no other explicit event class to register topics.

    @property
    def at(self) -> datetime:
        """Time of the last event applied."""
        return self.modified_on

    def state_dict(self) -> dict[str, Any]:
        """Public attributes, for auditors' time travel."""
        return {k: v for k, v in vars(self).items() if not k.startswith("_")}


def declare_event_versions(aggregate: type[TachographAggregate], **versions: int) -> None:
    """Set each event class's version (SPEC §3); every event of `aggregate` must be named.

    A version above 1 needs an `upcast_vN_vN+1` static method for every step below it,
    so an event stored by an earlier release still loads (the mapper applies them).
    """
    events = {
        name
        for name, value in vars(aggregate).items()
        if isinstance(value, type) and issubclass(value, aggregate.Event) and name != "Event"
    }
    if events != set(versions):
        missing, unknown = sorted(events - set(versions)), sorted(set(versions) - events)
        raise TypeError(
            f"{aggregate.__name__} event versions: missing {missing}, unknown {unknown}"
        )
    for name, version in versions.items():
        cls = getattr(aggregate, name)
        for step in range(1, version):
            if not hasattr(cls, f"upcast_v{step}_v{step + 1}"):
                raise TypeError(
                    f"{aggregate.__name__}.{name} v{version} lacks upcast_v{step}_v{step + 1}"
                )
        cls.class_version = version
