"""Policy commands and reads: record a revision, activate it, roll back, remove.

A document is compiled in full before anything is recorded, so a revision on the record
always evaluates; a bad one is a RuleViolation naming the rule and the problem.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

from eventsourcing.persistence import IntegrityError

from domain.application import Recorded, Tachograph
from domain.errors import NotFound, RuleViolation
from domain.policy.aggregate import GLOBAL, Policy, policy_id
from domain.policy.document import PolicyDocument, PolicyInvalid, digest
from infra.policy_source import compile_source
from projections.store import ReadStore
from services.active_policies import ActivePolicies


def validated(source: str) -> PolicyDocument:
    """The compiled document; RuleViolation naming the rule and the problem otherwise."""
    try:
        return compile_source(source)
    except PolicyInvalid as exc:
        details: dict[str, Any] = {"problem": exc.problem}
        if exc.rule_id is not None:
            details["ruleId"] = exc.rule_id
        raise RuleViolation(f"The policy document is invalid: {exc}", **details) from None


class Policies:
    """Changes to the record; each is followed by a refresh of this process's snapshot."""

    def __init__(self, app: Tachograph, store: ReadStore, active: ActivePolicies) -> None:
        self.app = app
        self.store = store
        self.active = active

    def record(self, source: str, workspace_id: str | None, actor: str) -> tuple[str, Recorded]:
        """Record a validated document as its scope's next revision (not yet active)."""
        document = validated(source)
        if workspace_id is not None:
            self.app.get_workspace(workspace_id)  # NotFound for a workspace never registered
        for _ in range(3):
            policy = self._policy(workspace_id, actor)
            revision = policy.record(source, "sha256:" + digest(source), document.mode, actor)
            try:
                return revision, Recorded(policy.id, self.app.record(policy))
            except IntegrityError:
                continue  # another revision of this scope was recorded first: number again
        raise RuleViolation("the policy changed concurrently; try again")

    def activate(self, revision: str, actor: str) -> Recorded:
        policy = self._owner(revision)
        changed = policy.activate(revision, actor)
        return self._saved(policy) if changed else Recorded(policy.id, None)

    def roll_back(self, revision: str, actor: str) -> Recorded:
        policy = self._owner(revision)
        policy.roll_back(revision, actor)
        return self._saved(policy)

    def remove(self, workspace_id: str | None, actor: str) -> Recorded:
        policy = self._load(policy_id(workspace_id))
        if policy is None:
            raise NotFound("this scope has no policy", workspaceId=workspace_id)
        policy.remove(actor)
        return self._saved(policy)

    def _saved(self, policy: Policy) -> Recorded:
        recorded = Recorded(policy.id, self.app.record(policy))
        self.active.refresh()
        return recorded

    def _policy(self, workspace_id: str | None, actor: str) -> Policy:
        found = self._load(policy_id(workspace_id))
        return found if found is not None else Policy(workspace_id=workspace_id, actor=actor)

    def _load(self, aggregate_id: UUID) -> Policy | None:
        try:
            return self.app.load(Policy, aggregate_id, "policy")
        except NotFound:
            return None

    def _owner(self, revision: str) -> Policy:
        row = self.store.query_one(
            "SELECT policy_id FROM rm_policy_revisions WHERE id = ?", (revision,)
        )
        if row is None:
            raise NotFound(f"no policy revision {revision}", revisionId=revision)
        return self.app.load(Policy, UUID(str(row["policy_id"])), "policy")


# --- reads -------------------------------------------------------------------------------


def _scope_out(scope: str) -> str | None:
    return None if scope == GLOBAL else scope


def revision_row(r: dict[str, Any], active: set[str] | None = None) -> dict[str, Any]:
    row = {
        "id": r["id"],
        "workspaceId": _scope_out(str(r["scope"])),
        "number": int(r["number"]),
        "source": r["source"],
        "digest": r["digest"],
        "mode": r["mode"],
        "actor": r["actor"],
        "recordedAt": r["recorded_at"],
        "position": int(r["position"]),
    }
    if active is not None:
        row["active"] = r["id"] in active
    return row


def active_revisions(store: ReadStore) -> list[dict[str, Any]]:
    """Each scope's active revision, the global one first."""
    rows = store.query(
        "SELECT r.*, a.actor AS activated_by, a.changed_at AS activated_at "
        "FROM rm_policy_active a JOIN rm_policy_revisions r ON r.id = a.revision_id "
        "ORDER BY CASE WHEN a.scope = ? THEN 0 ELSE 1 END, a.scope",
        (GLOBAL,),
    )
    return [
        {**revision_row(r), "activatedBy": r["activated_by"], "activatedAt": r["activated_at"]}
        for r in rows
    ]


def revisions(
    store: ReadStore, workspace_id: str | None, every_scope: bool
) -> list[dict[str, Any]]:
    """The revisions of one scope (or of all), newest first, each saying if it is active."""
    active = {
        str(r["revision_id"])
        for r in store.query("SELECT revision_id FROM rm_policy_active")
        if r["revision_id"]
    }
    if every_scope:
        rows = store.query("SELECT * FROM rm_policy_revisions ORDER BY position DESC")
    else:
        scope = workspace_id if workspace_id is not None else GLOBAL
        rows = store.query(
            "SELECT * FROM rm_policy_revisions WHERE scope = ? ORDER BY position DESC", (scope,)
        )
    return [revision_row(r, active) for r in rows]


def history(store: ReadStore, workspace_id: str | None) -> list[dict[str, Any]]:
    """What happened to a scope's policy, newest first."""
    scope = workspace_id if workspace_id is not None else GLOBAL
    rows = store.query(
        "SELECT * FROM rm_policy_history WHERE scope = ? ORDER BY position DESC", (scope,)
    )
    return [
        {
            "change": r["change"],
            "revisionId": r["revision_id"],
            "previousRevisionId": r["previous_revision_id"],
            "actor": r["actor"],
            "at": r["at"],
            "position": int(r["position"]),
        }
        for r in rows
    ]


def revision(store: ReadStore, revision_id: str) -> dict[str, Any]:
    row = store.query_one("SELECT * FROM rm_policy_revisions WHERE id = ?", (revision_id,))
    if row is None:
        raise NotFound(f"no policy revision {revision_id}", revisionId=revision_id)
    active = store.query_one(
        "SELECT 1 AS one FROM rm_policy_active WHERE revision_id = ?", (revision_id,)
    )
    return {**revision_row(row), "active": active is not None}
