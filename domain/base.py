"""Shared aggregate base: explicit topics so modules can move without breaking the log."""

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
