"""Check the Merkle read model and the signed checkpoints against the stored log.

Runs inside the hash chain's scan (domain/log_verify.py): each stored event is hashed as
a leaf, compared with the leaf the read model recorded for it, and the recomputed root
is compared with every signed checkpoint's root at its size. A signed checkpoint larger
than the whole log means its tail was cut off after signing.
"""

from __future__ import annotations

import hashlib
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
    """Recomputes the tree over the events a scan passes through.

    `compare_at` is how many leaves the read model holds: its root at that size is
    compared afterwards (`read_model_root`), and only when it differs are the recorded
    leaves read one by one to name the first that does (`first_leaf_mismatch`), so an
    intact log costs one leaf hash per event and no extra reads.
    """

    roots: Sequence[SignedRoot]
    compare_at: int = 0
    leaves: int = 0
    roots_checked: int = 0
    problem: ChainBreak | None = None
    root_at_compare: bytes | None = None
    _tree: CompactRange = field(default_factory=CompactRange)

    def scan(self, events: Iterable[StoredEvent]) -> Iterator[StoredEvent]:
        """Pass the events through, checking each signed root as its size goes by."""
        pending = iter(sorted(self.roots, key=lambda r: r.size))
        due = next(pending, None)
        due_size = due.size if due is not None else -1
        tree, sha256, compare_at = self._tree, hashlib.sha256, self.compare_at
        edge = tree.edge
        for e in events:
            yield e
            # leaf_hash(event_leaf(...)) and CompactRange.append_leaf, inlined: every
            # stored event passes here, and verify's speed is mostly this loop's.
            h = sha256(b"\x00" + e.head)
            h.update(e.payload)
            node, index = h.digest(), tree.size
            while index & 1:
                node = sha256(b"\x01" + edge.pop() + node).digest()
                index >>= 1
            edge.append(node)
            tree.size = self.leaves = size = tree.size + 1
            if size == compare_at:
                self.root_at_compare = tree.root()
            while size == due_size and due is not None:
                if self.problem is None and tree.root() != due.root:
                    self.problem = ChainBreak(
                        e.position,
                        NOTE_MISMATCH,
                        f"the signed checkpoint of size {due.size} does not match the log: "
                        "an event at or before this position was changed after signing",
                        seq=due.size,
                    )
                self.roots_checked += 1
                due = next(pending, None)
                due_size = due.size if due is not None else -1

    def read_model_differs(self, read_model_root: bytes) -> bool:
        """Whether the read model's root at `compare_at` leaves differs from the log's."""
        return self.root_at_compare is not None and self.root_at_compare != read_model_root

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


def first_leaf_mismatch(
    events: Iterable[StoredEvent], recorded: Iterable[RecordedLeaf]
) -> ChainBreak | None:
    """The first stored event whose leaf differs from the one the read model recorded."""
    for index, (e, mine) in enumerate(zip(events, recorded, strict=False)):
        leaf = leaf_hash(event_leaf(e.position, e.aggregate_id, e.version, e.type, e.payload))
        if (mine.index, mine.position, mine.hash) != (index, e.position, leaf):
            return ChainBreak(
                e.position,
                MERKLE_MISMATCH,
                f"the Merkle tree's leaf {mine.index} (position {mine.position}) does "
                f"not match the stored event at position {e.position}",
                seq=index + 1,
            )
    return None
