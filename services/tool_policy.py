"""The code-owned tool policy a credential carries, as the hook gateway applies it.

A self-update cycle's agent token names the policy and the clone it is confined to,
so whichever replica its hooks reach applies the same rules before any managed
handler, and again to any handler's rewrite (domain/self_update_policy.py).
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from domain.credentials import SELF_UPDATE_POLICY
from domain.hook_dispatch import ToolPolicy
from domain.self_update_policy import evaluate
from services.credentials import Principal


def tool_policy_for(principal: Principal) -> ToolPolicy | None:
    binding = principal.binding
    if binding.policy != SELF_UPDATE_POLICY or binding.root is None:
        return None
    return _self_update(binding.root)


@lru_cache(maxsize=256)
def _self_update(clone_root: str) -> ToolPolicy:
    def check(tool_name: str | None, tool_input: Any, cwd: str | None) -> tuple[str, str] | None:
        # Objects, patch strings and argv lists alike: what the policy cannot read it refuses.
        given = {} if tool_input is None else tool_input
        denial = evaluate(tool_name or "", given, clone_root=clone_root, cwd=cwd)
        return None if denial is None else (denial.rule, denial.reason)

    return check
