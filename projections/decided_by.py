"""Who decided a dispatch: the party a timeline row or an activity row names as `decidedBy`.

Read from the dispatch's own record (HookDispatch.Created's outcome and runs), so a
rebuild derives exactly what the live read model stored:

- `operator`: a person allowed or denied the call through an approval (`operator`,
  their `reason`, `approvalId`, `forSession`; `id` is the rule or handler that asked);
- `approval`: an approval rule settled it without a person (its timeout outcome, or a
  call refused while it still waited); `id` is the rule or handler that asked;
- `policy`: a code-owned tool policy refused it (the self-update floor), or a policy
  rule of the operator's documents denied it (docs/policy.md); `id` its rule;
- `handler`: a managed handler denied, rewrote, asked about or continued it; `id` the
  handler's id and `reason` the reason it gave;
- `none`: nothing objected, and the call passed by default.

Dispatches recorded before approval runs carried their approval's details still name
the approval rule; their operator is then only in `reason`.
"""

from __future__ import annotations

import json
from typing import Any, Final

from domain.approval import APPROVAL_HANDLER
from domain.hook_dispatch import POLICY_HANDLER

KINDS: Final = ("operator", "approval", "policy", "handler", "none")
NOBODY: Final[dict[str, Any]] = {
    "kind": "none",
    "id": None,
    "operator": None,
    "reason": None,
    "approvalId": None,
    "forSession": None,
}
_APPROVAL_PREFIX = APPROVAL_HANDLER + ":"
_POLICY_PREFIX = POLICY_HANDLER + ":"


def decided_by(d: dict[str, Any]) -> dict[str, Any]:
    """The deciding party of a HookDispatch.Created's data (see the module docstring)."""
    run = _deciding_run(d["outcome"], d["runs"] or ())
    if run is None:
        return _by_policy_rule(d)
    handler_id = str(run.get("handler_id") or "")
    if handler_id.startswith(_APPROVAL_PREFIX):
        return _by_approval(run, handler_id[len(_APPROVAL_PREFIX) :])
    if handler_id.startswith(_POLICY_PREFIX):
        rule = handler_id[len(_POLICY_PREFIX) :]
        return {**NOBODY, "kind": "policy", "id": rule, "reason": run.get("reason")}
    return {**NOBODY, "kind": "handler", "id": handler_id or None, "reason": run.get("reason")}


def _by_policy_rule(d: dict[str, Any]) -> dict[str, Any]:
    """An enforced policy rule's deny is recorded without a run (no handler was asked):
    the dispatch's `policy` names it."""
    hit = d.get("policy") or {}
    if d["outcome"] == "deny" and hit.get("mode") == "enforce" and hit.get("outcome") == "deny":
        return {**NOBODY, "kind": "policy", "id": hit["rule_id"], "reason": d["reason"]}
    return dict(NOBODY)


def _deciding_run(outcome: str, runs: Any) -> dict[str, Any] | None:
    """The run that made the outcome: an approval's (a person's word is the last one, and
    an allowed call keeps a handler's rewrite), else the last run with the outcome, else
    (a held call refused where nothing could hold it) the last run that objected."""
    for run in reversed(runs):
        if str(run.get("handler_id") or "").startswith(_APPROVAL_PREFIX):
            return dict(run)
    if outcome == "pass":
        return None
    for run in reversed(runs):
        if run.get("outcome") == outcome:
            return dict(run)
    for run in reversed(runs):
        if run.get("outcome") not in (None, "pass"):
            return dict(run)
    return None


def _by_approval(run: dict[str, Any], source: str) -> dict[str, Any]:
    approval = run.get("approval") or {}
    asked_by = approval.get("rule_id") or approval.get("handler_id") or source
    operator = approval.get("operator")
    person = approval.get("status") == "decided"
    return {
        "kind": "operator" if person else "approval",
        "id": asked_by,
        "operator": operator,
        "reason": approval.get("reason") if person else run.get("reason"),
        "approvalId": approval.get("id"),
        "forSession": bool(approval.get("for_session")) if person else None,
    }


def label(decided: dict[str, Any] | None) -> str:
    """The deciding party in a few words (the CLI's column): `key:alice (risky-git)`,
    `approval:risky-git`, `policy:git-remote`, `handler:deny-rm`; `-` for nobody."""
    if decided is None or decided["kind"] == "none":
        return "-"
    if decided["kind"] == "operator":
        who = decided["operator"] or "an operator"
        return f"{who} ({decided['id']})" if decided["id"] else who
    return f"{decided['kind']}:{decided['id']}"


def stored(d: dict[str, Any]) -> str:
    """`decided_by` as a read model column keeps it (compact JSON)."""
    decided = decided_by(d)
    if decided["kind"] == "none":
        return _NOBODY_STORED  # most calls: encoded once, not per event
    return json.dumps(decided, separators=(",", ":"), ensure_ascii=False)


_NOBODY_STORED: Final = json.dumps(NOBODY, separators=(",", ":"), ensure_ascii=False)


def loaded(text: str | None) -> dict[str, Any] | None:
    """A stored `decided_by` column as served; None for a row that has none."""
    return None if text is None else dict(json.loads(text))
