"""What the policy rules say of one call, as the hook path and the record carry it.

Standard library only: domain/hook_dispatch.py (which the command hook client loads)
names these types.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class PolicyHit:
    """The rule that decided a call (or would have, in shadow mode), as recorded."""

    revision_id: str
    rule_id: str
    mode: str
    outcome: str
    reason: str | None = None
    context: str | None = None
    timeout_s: int = 0
    on_timeout: str = "deny"
    # The expression failed on this call and the rule applied anyway (onError: apply).
    error: str | None = None

    @property
    def enforced(self) -> bool:
        return self.mode == "enforce"

    def record(self) -> dict[str, Any]:
        """What the log keeps of it on the dispatch."""
        kept: dict[str, Any] = {
            "revision_id": self.revision_id,
            "rule_id": self.rule_id,
            "mode": self.mode,
            "outcome": self.outcome,
        }
        if self.error is not None:
            kept["error"] = self.error
        return kept

    def denial_reason(self) -> str:
        return self.reason or f'denied by policy rule "{self.rule_id}"'

    def ask_reason(self) -> str:
        return self.reason or f'policy rule "{self.rule_id}" asks a person'


@dataclass(frozen=True)
class PolicyVerdict:
    """What the rules say of one call: the enforced hit that decides, and the shadow hit
    that would have (each None when no such rule matched)."""

    enforced: PolicyHit | None
    shadow: PolicyHit | None
    failures: tuple[tuple[str, str], ...] = ()

    @property
    def recorded(self) -> PolicyHit | None:
        """The hit the dispatch records: the enforced one, else the shadow one."""
        return self.enforced or self.shadow

    @property
    def holds(self) -> bool:
        return self.enforced is not None and self.enforced.outcome == "ask"
