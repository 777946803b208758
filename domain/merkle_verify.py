"""Check the Merkle read model and the signed checkpoints against the stored log.

Runs inside the hash chain's scan (domain/log_verify.py): each stored event is hashed as
a leaf, compared with the leaf the read model recorded for it, and the recomputed root
is compared with every signed checkpoint's root at its size. A signed checkpoint larger
than the whole log means its tail was cut off after signing.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field

from domain.log_verify import ChainBreak, StoredEvent
from domain.merkle import CompactRange, event_leaf, leaf_hash

MERKLE_MISMATCH, NOTE_MISMATCH, TRUNCATED = "merkle_mismatch", "checkpoint_mismatch", "truncated"


@dataclass(frozen=True)
class RecordedLeaf:
    index: int
    position: int
    hash: bytes


@dataclass(frozen=True)
class SignedRoot:
    """A signed checkpoint's size and root, and the position of its last leaf."""

    size: int
    root: bytes
    position: int


@dataclass
class TreeAudit:
    roots: Sequence[SignedRoot]
    leaves: int = 0
    roots_checked: int = 0
    behind: bool = False  # the read model had fewer leaves than the log had events
    problem: ChainBreak | None = None
    _tree: CompactRange = field(default_factory=CompactRange)

    def scan(
        self, events: Iterable[StoredEvent], recorded: Iterator[RecordedLeaf]
    ) -> Iterator[StoredEvent]:
        """Pass the events through, checking each as it goes by."""
        pending = iter(sorted(self.roots, key=lambda r: r.size))
        due = next(pending, None)
        tree = self._tree
        for e in events:
            yield e
            if self.problem is not None:
                continue
            leaf = leaf_hash(event_leaf(e.position, e.aggregate_id, e.version, e.type, e.payload))
            mine = None if self.behind else next(recorded, None)
            if mine is None:
                self.behind = True
            elif (mine.index, mine.position, mine.hash) != (tree.size, e.position, leaf):
                self.problem = ChainBreak(
                    e.position,
                    MERKLE_MISMATCH,
                    f"the Merkle tree's leaf {mine.index} (position {mine.position}) does "
                    f"not match the stored event at position {e.position}",
                    seq=tree.size + 1,
                )
                continue
            tree.append(leaf)
            self.leaves = tree.size
            while due is not None and due.size == tree.size:
                if tree.root() != due.root:
                    self.problem = ChainBreak(
                        e.position,
                        NOTE_MISMATCH,
                        f"the signed checkpoint of size {due.size} does not match the log: "
                        "an event at or before this position was changed after signing",
                        seq=due.size,
                    )
                self.roots_checked += 1
                due = next(pending, None)

    def tail_problem(self, head_position: int) -> ChainBreak | None:
        """After a full scan: a signed size beyond the log names its missing tail."""
        beyond = [r for r in self.roots if r.size > self._tree.size]
        if self.problem is not None or not beyond:
            return self.problem
        largest = max(beyond, key=lambda r: r.size)
        return ChainBreak(
            head_position + 1,
            TRUNCATED,
            f"a signed checkpoint covers {largest.size} events (through position "
            f"{largest.position}) but the log holds {self._tree.size}: its tail was removed",
            seq=self._tree.size + 1,
        )
