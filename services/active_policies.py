"""This process's compiled copy of every active policy revision, judged on the hook path.

Hooks ask `judge` and get an answer from memory: the documents were compiled when they
became active, and the snapshot is one immutable tuple swapped whole, so a call is
judged by one consistent set of revisions (never half a rollback). It is rebuilt from
the policy read model, as learned content is (services/learned_context.py):
- by the projection runner, inside the batch that applied an activation, rollback or
  removal, before the runner reports that position processed;
- after a command of this process changed a scope (`refresh`);
- by a follower thread, at most `interval_s` after another process changed one.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

from domain.lifecycle import LifecycleEvent
from domain.policy.aggregate import GLOBAL
from domain.policy.document import Compiler, PolicyDocument
from domain.policy.judge import ActivePolicy, judge
from domain.policy.value import CallContext
from domain.policy.verdict import PolicyVerdict
from infra.policy_source import COMPILER, compile_source
from projections.store import Cursor, ReadStore
from services.follower import Follower

REFRESH_INTERVAL_S = 1.0
# A session's title may change; rules reading `session.title` see it at most this old.
_TITLE_KEPT_S = 5.0
_TITLES_KEPT = 4096
# Names that need the session looked up (its workspace is needed anyway for scopes).
_SESSION_NAMES = frozenset({"session", "usage"})


@dataclass(frozen=True, eq=False)
class Snapshot:
    """Every active revision as of log `position`, the global one first."""

    position: int
    policies: tuple[ActivePolicy, ...]
    # The events some active rule is on: every other hook skips policy at once.
    events: frozenset[str] = field(init=False)
    scoped: bool = field(init=False)

    def __post_init__(self) -> None:
        events = frozenset(e for p in self.policies for e in p.document.names_by_event)
        object.__setattr__(self, "events", events)
        object.__setattr__(self, "scoped", any(p.workspace is not None for p in self.policies))

    def for_workspace(self, workspace: str) -> tuple[ActivePolicy, ...]:
        return tuple(p for p in self.policies if p.workspace in (None, workspace))

    @property
    def longest_hold_s(self) -> int:
        return max((p.document.longest_hold_s for p in self.policies), default=0)


EMPTY = Snapshot(0, ())


def read_active(cur: Cursor, prefix: str = "rm_") -> list[tuple[str, str | None, str, int]]:
    """(revision id, workspace or None, source, position) of each scope's active revision."""
    cur.execute(
        f"SELECT a.scope, a.revision_id, a.position, r.source FROM {prefix}policy_active a "
        f"JOIN {prefix}policy_revisions r ON r.id = a.revision_id ORDER BY a.scope"
    )
    rows = [
        (str(r["revision_id"]), None if r["scope"] == GLOBAL else str(r["scope"]), str(r["source"]),
         int(r["position"]))
        for r in cur.fetchall()
    ]  # fmt: skip
    cur.execute(f"SELECT MAX(position) AS position FROM {prefix}policy_active")
    head = cur.fetchone()
    top = int(head["position"]) if head and head["position"] is not None else 0
    return [(rid, ws, src, top) for rid, ws, src, _ in rows] or [("", None, "", top)]


class ActivePolicies:
    """Judges calls by the active revisions; safe from any thread."""

    def __init__(
        self,
        store: ReadStore,
        *,
        workspace_of: Callable[[UUID], str | None],
        title_of: Callable[[UUID], str | None] = lambda _: None,
        usage_of: Callable[[str, str], Mapping[str, Any]] | None = None,
        compiler: Compiler = COMPILER,
        prefix: str = "rm_",
        interval_s: float = REFRESH_INTERVAL_S,
    ) -> None:
        self.store = store
        self.workspace_of = workspace_of
        self.title_of = title_of
        # The session's and workspace's spend (services/usage_figures.py), from memory.
        self.usage_of = usage_of
        self.compiler = compiler
        self.prefix = prefix
        self.interval_s = interval_s
        self._snapshot = EMPTY
        self._compiled: dict[str, PolicyDocument] = {}
        self._titles: dict[UUID, tuple[float, str | None]] = {}
        self._swap = threading.Lock()
        self._follower = Follower("policies", interval_s, self._changed_elsewhere, self.refresh)

    @property
    def snapshot(self) -> Snapshot:
        return self._snapshot

    # --- the hook path ----------------------------------------------------------------

    def longest_hold_s(self) -> int:
        return self._snapshot.longest_hold_s

    def applies(self, event: str) -> bool:
        return event in self._snapshot.events

    def judge(self, session_id: UUID, ev: LifecycleEvent) -> PolicyVerdict | None:
        """The verdict of the active rules on one call (None: no rule is on its event)."""
        snapshot = self._snapshot
        if ev.event not in snapshot.events:
            return None
        workspace = self.workspace_of(session_id) or ""
        policies = snapshot.for_workspace(workspace) if snapshot.scoped else snapshot.policies
        reads = self._reads(policies, ev.event)
        title = self._title(session_id) if "session" in reads else None
        usage = None
        if "usage" in reads and self.usage_of is not None:
            usage = self.usage_of(str(session_id), workspace)
        context = CallContext(str(session_id), workspace, ev.agent, title, usage)
        return judge(policies, ev, context, self.compiler)

    def _reads(self, policies: tuple[ActivePolicy, ...], event: str) -> frozenset[str]:
        names: frozenset[str] = frozenset()
        for policy in policies:
            names |= policy.document.names_by_event.get(event, frozenset())
        return names & _SESSION_NAMES

    def _title(self, session_id: UUID) -> str | None:
        now = time.monotonic()
        kept = self._titles.get(session_id)
        if kept is not None and now - kept[0] < _TITLE_KEPT_S:
            return kept[1]
        title = self.title_of(session_id)
        if len(self._titles) >= _TITLES_KEPT:
            self._titles.clear()
        self._titles[session_id] = (now, title)
        return title

    # --- keeping current --------------------------------------------------------------

    def load(self, cur: Cursor) -> None:
        """Rebuild from the read model as `cur` sees it (the runner's batch)."""
        self._offer(self._build(read_active(cur, self.prefix)))

    def refresh(self) -> None:
        """Rebuild from the committed read model (a command's or the follower's thread)."""
        with self.store.transaction(write=False) as cur:
            rows = read_active(cur, self.prefix)
        self._offer(self._build(rows))

    def _build(self, rows: list[tuple[str, str | None, str, int]]) -> Snapshot:
        policies: list[ActivePolicy] = []
        for revision, workspace, source, _ in rows:
            if not revision:
                continue
            document = self._compiled.get(revision)
            if document is None:
                # Validated when recorded; compiled once per process.
                document = compile_source(source, self.compiler)
                self._compiled[revision] = document
            policies.append(ActivePolicy(revision, workspace, document))
        policies.sort(key=lambda p: p.workspace is not None)  # the global document first
        return Snapshot(rows[0][3] if rows else 0, tuple(policies))

    def _offer(self, snapshot: Snapshot) -> None:
        with self._swap:
            if snapshot.position >= self._snapshot.position:
                self._snapshot = snapshot

    def _changed_elsewhere(self) -> bool:
        row = self.store.query_one(
            f"SELECT MAX(position) AS position FROM {self.prefix}policy_active"
        )
        head = int(row["position"]) if row and row["position"] is not None else 0
        return head > self._snapshot.position

    def start(self) -> None:
        self._follower.start()

    def stop(self) -> None:
        self._follower.stop()
