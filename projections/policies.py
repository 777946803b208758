"""Policy read models: every revision with its source, each scope's active revision, and
the history of activations, rollbacks and removals."""

from __future__ import annotations

from domain.policy.aggregate import GLOBAL
from projections.base import Envelope, ListenedProjection, handles
from projections.store import Cursor


def _scope(workspace_id: str | None) -> str:
    return workspace_id if workspace_id is not None else GLOBAL


class PoliciesProjection(ListenedProjection):
    name = "policies"
    # The live instance's listener: this process's active policies (services/active_policies.py).
    tables = {
        "policies": [
            "CREATE TABLE IF NOT EXISTS {t} (policy_id TEXT PRIMARY KEY, scope TEXT NOT NULL)"
        ],
        "policy_revisions": [
            "CREATE TABLE IF NOT EXISTS {t} (id TEXT PRIMARY KEY, policy_id TEXT NOT NULL, "
            "scope TEXT NOT NULL, number INTEGER NOT NULL, source TEXT NOT NULL, "
            "digest TEXT NOT NULL, mode TEXT NOT NULL, actor TEXT NOT NULL, "
            "recorded_at TEXT NOT NULL, position BIGINT NOT NULL)",
            "CREATE INDEX IF NOT EXISTS {t}_scope ON {t} (scope, number)",
        ],
        # One row per scope that ever had a policy; revision_id NULL once removed.
        "policy_active": [
            "CREATE TABLE IF NOT EXISTS {t} (scope TEXT PRIMARY KEY, policy_id TEXT NOT NULL, "
            "revision_id TEXT, actor TEXT NOT NULL, changed_at TEXT NOT NULL, "
            "position BIGINT NOT NULL)"
        ],
        "policy_history": [
            "CREATE TABLE IF NOT EXISTS {t} (position BIGINT PRIMARY KEY, policy_id TEXT NOT NULL, "
            "scope TEXT NOT NULL, change TEXT NOT NULL, revision_id TEXT, "
            "previous_revision_id TEXT, actor TEXT NOT NULL, at TEXT NOT NULL)",
            "CREATE INDEX IF NOT EXISTS {t}_scope ON {t} (scope, position)",
        ],
    }

    @handles("Policy.Created")
    def created(self, cur: Cursor, e: Envelope) -> None:
        cur.execute(
            f"INSERT INTO {self.t['policies']} (policy_id, scope) VALUES (?,?)",
            (e.key, _scope(e.data["workspace_id"])),
        )

    @handles("Policy.RevisionRecorded")
    def recorded(self, cur: Cursor, e: Envelope) -> None:
        d = e.data
        cur.execute(
            f"INSERT INTO {self.t['policy_revisions']} (id, policy_id, scope, number, source, "
            "digest, mode, actor, recorded_at, position) VALUES (?,?,?,?,?,?,?,?,?,?)",
            (
                d["revision_id"],
                e.key,
                self._scope_of(cur, e.key),
                int(d["number"]),
                d["source"],
                d["digest"],
                d["mode"],
                d["actor"],
                e.at,
                e.position,
            ),
        )
        self._history(cur, e, "record", d["revision_id"], None)

    @handles("Policy.Activated")
    def activated(self, cur: Cursor, e: Envelope) -> None:
        self._set_active(cur, e, "activate", e.data["revision_id"])

    @handles("Policy.RolledBack")
    def rolled_back(self, cur: Cursor, e: Envelope) -> None:
        self._set_active(cur, e, "rollback", e.data["revision_id"])

    @handles("Policy.Removed")
    def removed(self, cur: Cursor, e: Envelope) -> None:
        self._set_active(cur, e, "remove", None)

    def _scope_of(self, cur: Cursor, policy: str) -> str:
        """Later events carry only the policy id; its Created event named the scope."""
        cur.execute(f"SELECT scope FROM {self.t['policies']} WHERE policy_id = ?", (policy,))
        row = cur.fetchone()
        return str(row["scope"]) if row is not None else GLOBAL

    def _set_active(self, cur: Cursor, e: Envelope, change: str, revision: str | None) -> None:
        scope = self._scope_of(cur, e.key)
        cur.execute(f"DELETE FROM {self.t['policy_active']} WHERE scope = ?", (scope,))
        cur.execute(
            f"INSERT INTO {self.t['policy_active']} (scope, policy_id, revision_id, actor, "
            "changed_at, position) VALUES (?,?,?,?,?,?)",
            (scope, e.key, revision, e.data["actor"], e.at, e.position),
        )
        self._history(cur, e, change, revision, e.data.get("previous_revision_id"))
        self.changed()

    def _history(
        self, cur: Cursor, e: Envelope, change: str, revision: str | None, previous: str | None
    ) -> None:
        cur.execute(
            f"INSERT INTO {self.t['policy_history']} (position, policy_id, scope, change, "
            "revision_id, previous_revision_id, actor, at) VALUES (?,?,?,?,?,?,?,?)",
            (
                e.position,
                e.key,
                self._scope_of(cur, e.key),
                change,
                revision,
                previous,
                e.data["actor"],
                e.at,
            ),
        )
