"""Judging one call against the active policy documents (docs/policy.md, "Order").

Every rule on the call's event is evaluated against one value. Among the enforced rules
that match, the strongest outcome decides (deny before ask before context) and, within
it, the first rule in order (the global document's before a workspace's). Shadow rules
are evaluated the same way and only recorded.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from domain.lifecycle import LifecycleEvent
from domain.policy.document import STRENGTH, Compiler, PolicyDocument, PolicyRule
from domain.policy.value import CallContext, call_value
from domain.policy.verdict import PolicyHit, PolicyVerdict

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ActivePolicy:
    """A scope's active revision: `workspace` None for the global one."""

    revision_id: str
    workspace: str | None
    document: PolicyDocument


def judge(
    policies: Sequence[ActivePolicy],
    ev: LifecycleEvent,
    context: CallContext,
    compiler: Compiler,
) -> PolicyVerdict | None:
    """The verdict on one call; None when no rule is on its event."""
    names: frozenset[str] = frozenset()
    for policy in policies:
        names |= policy.document.names_by_event.get(ev.event, frozenset())
    candidates = [(p, r) for p in policies for r in p.document.rules if ev.event in r.on]
    if not candidates:
        return None
    activation = compiler.activation(call_value(ev, context, names))
    best: dict[bool, tuple[ActivePolicy, PolicyRule, str | None]] = {}
    failures: list[tuple[str, str]] = []
    for policy, rule in candidates:
        current = best.get(rule.shadow)
        if current is not None and STRENGTH[current[1].then] <= STRENGTH[rule.then]:
            continue  # a rule as strong already matched first
        error: str | None = None
        try:
            matched = rule.expression.matches(activation)
        except Exception as exc:  # noqa: BLE001 - decided per rule, never a silent pass
            error = f"{type(exc).__name__}: {exc}"[:300]
            failures.append((rule.id, error))
            log.warning(
                "policy rule failed on a call",
                extra={"rule_id": rule.id, "revision_id": policy.revision_id, "error": error},
            )
            matched = rule.on_error == "apply"
        if matched:
            best[rule.shadow] = (policy, rule, error)
    return PolicyVerdict(_hit(best.get(False)), _hit(best.get(True)), tuple(failures))


def _hit(found: tuple[ActivePolicy, PolicyRule, str | None] | None) -> PolicyHit | None:
    if found is None:
        return None
    policy, rule, error = found
    reason = rule.reason
    if error is not None:
        reason = f"{reason or rule.id} (the rule could not be evaluated: {error})"
    return PolicyHit(
        revision_id=policy.revision_id,
        rule_id=rule.id,
        mode=rule.mode,
        outcome=rule.then,
        reason=reason,
        context=rule.context,
        timeout_s=rule.timeout_s,
        on_timeout=rule.on_timeout,
        error=error,
    )
