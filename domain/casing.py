"""Field-name casing between the wire (camelCase) and the log (snake_case); stdlib only."""

from __future__ import annotations

import re

_SNAKE_JOINT = re.compile(r"(?<=[A-Za-z0-9])_([A-Za-z0-9])")
_CAMEL_JOINT = re.compile(r"(?<=[a-z0-9])([A-Z])")


def to_camel(name: str) -> str:
    """A snake_case name in camelCase (other names unchanged)."""
    return _SNAKE_JOINT.sub(lambda m: m.group(1).upper(), name)


def to_snake(name: str) -> str:
    """A camelCase name in snake_case (other names unchanged)."""
    return _CAMEL_JOINT.sub(lambda m: "_" + m.group(1).lower(), name)
