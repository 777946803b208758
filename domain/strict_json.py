"""Strict JSON for answers from outside (hook handlers, reflectors).

Duplicate keys make an answer ambiguous and NaN/Infinity are not JSON; both are
refused rather than silently resolved, so a decision is never read two ways.
"""

from __future__ import annotations

import json
from typing import Any, NoReturn


class StrictJSONError(ValueError):
    """The bytes are not one unambiguous UTF-8 JSON object."""


def _unique_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj: dict[str, Any] = {}
    for key, value in pairs:
        if key in obj:
            raise StrictJSONError("has a duplicate key")
        obj[key] = value
    return obj


def _reject_constant(name: str) -> NoReturn:
    raise StrictJSONError(f"contains {name}, which is not JSON")


def strict_json_object(body: bytes) -> dict[str, Any]:
    """Decode a UTF-8 JSON object; raise StrictJSONError (message starts with a verb phrase)."""
    try:
        value = json.loads(
            body.decode("utf-8"), object_pairs_hook=_unique_pairs, parse_constant=_reject_constant
        )
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise StrictJSONError("is not valid UTF-8 JSON") from None
    if not isinstance(value, dict):
        raise StrictJSONError("is not a JSON object")
    return value
