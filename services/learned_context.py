"""This process's snapshot of every agent's learned content, for delivery on hot paths.

Hooks and task starts ask `for_agent` and get an answer from memory: never a database
read on the caller's thread. The snapshot is one immutable object swapped whole, so a
delivery composes from one consistent state of every target (never half a revert).

It is rebuilt from the learned read model:
- by the projection runner, inside the batch that applied a LearnedTarget event, before
  the runner reports that position processed (so a command that waits for its own
  position, a revert, is followed by deliveries that reflect it);
- after a command route of this process changed a target (`refresh`), in case another
  process's runner applied the event first;
- by a follower thread, at most `interval_s` after another process changed a target.
A state is only ever replaced by a newer one (its log position), whichever comes first.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from uuid import UUID

from domain.learned_delivery import DEFAULT_BUDGET_BYTES, NOTHING, Composed, LearnedEntry, compose
from projections.store import Cursor, ReadStore
from services.follower import Follower

REFRESH_INTERVAL_S = 1.0
_COMPOSED_KEPT = 256


@dataclass(frozen=True, eq=False)
class Snapshot:
    """Every agent's deliverable targets as of log `position`."""

    position: int
    by_agent: Mapping[str, tuple[LearnedEntry, ...]]
    # Compositions already made from this snapshot, by (agent, budget, workspace).
    _composed: dict[tuple[str, int, str | None], Composed] = field(default_factory=dict, repr=False)

    def compose(self, agent_id: str, budget_bytes: int, workspace_id: str | None) -> Composed:
        key = (agent_id, budget_bytes, workspace_id)
        found = self._composed.get(key)
        if found is not None:
            return found
        entries = self.by_agent.get(agent_id)
        composed = compose(entries, budget_bytes, workspace_id) if entries else NOTHING
        if len(self._composed) >= _COMPOSED_KEPT:
            self._composed.clear()
        self._composed[key] = composed
        return composed


EMPTY = Snapshot(0, {})


def _tables(prefix: str) -> tuple[str, str]:
    return f"{prefix}learned_targets", f"{prefix}learned_history"


def read_snapshot(cur: Cursor, prefix: str = "rm_") -> Snapshot:
    """The deliverable targets from the learned read model, through `cur`.

    A target's revision id is its latest revision unless a person's edit set the
    content it holds (also after a hand-back, until evolution revises it again); its
    position is that of the change that set the content.
    """
    targets, history = _tables(prefix)
    cur.execute(f"SELECT MAX(position) AS position FROM {history}")
    head = cur.fetchone()
    cur.execute(
        f"SELECT t.id, t.kind, t.agent_id, t.key, t.content, t.workspace_id, "
        f"t.promoted_digest, t.promoted_everywhere, t.promoted_workspaces, h.revision_id, "
        f"h.position FROM {targets} t JOIN {history} h ON h.target_id = t.id "
        f"WHERE t.content IS NOT NULL AND t.content <> '' AND h.position = ("
        f"SELECT MAX(position) FROM {history} WHERE target_id = t.id "
        f"AND change NOT IN ('hand_back', 'promote'))"
    )
    by_agent: dict[str, list[LearnedEntry]] = {}
    for row in cur.fetchall():
        entry = LearnedEntry(
            target_id=str(row["id"]),
            kind=str(row["kind"]),
            agent_id=str(row["agent_id"]),
            key=str(row["key"]),
            content=str(row["content"]),
            revision_id=str(row["revision_id"]) if row["revision_id"] else None,
            position=int(row["position"]),
            workspace_id=row["workspace_id"],
            promoted_digest=row["promoted_digest"],
            promoted_everywhere=bool(row["promoted_everywhere"]),
            promoted_workspaces=frozenset(json.loads(row["promoted_workspaces"] or "[]")),
        )
        by_agent.setdefault(entry.agent_id, []).append(entry)
    position = int(head["position"]) if head and head["position"] is not None else 0
    return Snapshot(
        position, {agent: tuple(sorted(e, key=lambda x: x.order)) for agent, e in by_agent.items()}
    )


class LearnedContext:
    """Compose an agent's learned content from the current snapshot; safe from any thread."""

    def __init__(
        self,
        store: ReadStore,
        *,
        prefix: str = "rm_",
        interval_s: float = REFRESH_INTERVAL_S,
        workspace_of: Callable[[UUID], str | None] = lambda _: None,
    ) -> None:
        self.store = store
        # The workspace a session lives in (sessions never move; the caller caches).
        self.workspace_of = workspace_of
        self.prefix = prefix
        self.interval_s = interval_s
        self._snapshot = EMPTY
        self._swap = threading.Lock()
        self._follower = Follower("learned", interval_s, self._changed_elsewhere, self.refresh)

    @property
    def snapshot(self) -> Snapshot:
        return self._snapshot

    @property
    def position(self) -> int:
        """The log position of the newest change the snapshot reflects."""
        return self._snapshot.position

    def for_agent(
        self,
        agent_id: str,
        budget_bytes: int = DEFAULT_BUDGET_BYTES,
        workspace_id: str | None = None,
    ) -> Composed:
        """The learned text for the agent in `workspace_id` within `budget_bytes`, and
        the items it carries (None: only what reaches every workspace)."""
        if budget_bytes <= 0:
            return NOTHING
        # One read of the reference: the whole answer comes from this one snapshot.
        return self._snapshot.compose(agent_id, budget_bytes, workspace_id)

    def for_session(self, agent_id: str, budget_bytes: int, session_id: UUID) -> Composed:
        """for_agent in the workspace the session lives in."""
        if budget_bytes <= 0 or agent_id not in self._snapshot.by_agent:
            return NOTHING  # nothing to deliver: no need to know the workspace
        return self.for_agent(agent_id, budget_bytes, self.workspace_of(session_id))

    def load(self, cur: Cursor) -> None:
        """Rebuild from the read model as `cur` sees it (the runner's batch)."""
        self._offer(read_snapshot(cur, self.prefix))

    def refresh(self) -> None:
        """Rebuild from the committed read model (a route's or the follower's thread)."""
        with self.store.transaction(write=False) as cur:
            snapshot = read_snapshot(cur, self.prefix)
        self._offer(snapshot)

    def _offer(self, snapshot: Snapshot) -> None:
        with self._swap:
            if snapshot.position >= self._snapshot.position:
                self._snapshot = snapshot

    def _changed_elsewhere(self) -> bool:
        _, history = _tables(self.prefix)
        row = self.store.query_one(f"SELECT MAX(position) AS position FROM {history}")
        head = int(row["position"]) if row and row["position"] is not None else 0
        return head > self._snapshot.position

    # Following other processes' changes

    def start(self) -> None:
        self._follower.start()

    def stop(self) -> None:
        self._follower.stop()
