"""The policy rule a dispatch records, as the read models keep and serve it.

HookDispatch.Created's `policy` (`{revision_id, rule_id, mode, outcome[, error]}`, or
None when no rule matched: domain/policy/verdict.py) is served at the edge as
`policy: {revisionId, ruleId, mode, outcome[, error]}`, or null. Derived from the
dispatch's own record, so a rebuild stores exactly what the live read model did.
"""

from __future__ import annotations

import json
from typing import Any

_WIRE_NAMES = {
    "revision_id": "revisionId",
    "rule_id": "ruleId",
    "mode": "mode",
    "outcome": "outcome",
    "error": "error",
}


def served(d: dict[str, Any]) -> dict[str, Any] | None:
    """The dispatch's policy hit as the API serves it; None when no rule matched."""
    hit = d.get("policy")
    if not hit:
        return None
    return {wire: hit[name] for name, wire in _WIRE_NAMES.items() if name in hit}


def stored(d: dict[str, Any]) -> str | None:
    """`policy` as a read model column keeps it (compact JSON); None for most calls."""
    hit = served(d)
    return None if hit is None else json.dumps(hit, separators=(",", ":"), ensure_ascii=False)


def loaded(text: str | None) -> dict[str, Any] | None:
    """A stored `policy` column as served."""
    return None if text is None else dict(json.loads(text))
