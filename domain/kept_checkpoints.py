"""Where a log stopped matching the signed checkpoints an auditor kept.

An auditor keeps the checkpoints a log showed them (signed notes: size and root). Later
the log's events are hashed again as RFC 6962 leaves and each kept root is compared
with the recomputed tree at its size. A root is one hash, so it tells only whether the
first `size` events are unchanged: the first change lies after the largest kept size that
still matches and within the smallest that does not. With a checkpoint kept at every
size (or at consecutive sizes around the change) that is one event, named exactly;
otherwise the window is named. A kept size beyond the log's is a truncation.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from domain.log_verify import StoredEvent
from domain.merkle import CompactRange
from domain.signed_note import NoteError

REWRITTEN, TRUNCATED = "rewritten", "truncated"
_SIGNATURE = "\u2014 "


@dataclass(frozen=True)
class KeptRoot:
    size: int
    root: bytes


@dataclass(frozen=True)
class Divergence:
    """The first kept checkpoint the log no longer matches, and where the change lies.

    Leaves `first_leaf` .. `last_leaf` (inclusive) hold the first change; `exact` when
    that is one leaf. Positions are the log's as it is now (None: no such leaf now).
    """

    kind: str
    kept_size: int
    matched_size: int
    log_size: int | None  # known for a truncation (the scan stops at a rewrite)
    first_leaf: int
    last_leaf: int
    first_position: int | None
    last_position: int | None

    @property
    def exact(self) -> bool:
        return self.first_leaf == self.last_leaf

    def describe(self) -> str:
        cp = f"the kept checkpoint of size {self.kept_size}"
        if self.kind == TRUNCATED and self.exact:
            after = f", after position {self.last_position}," if self.last_position else ""
            return (
                f"{cp} covers {self.kept_size} events but the log holds {self.log_size}: "
                f"the events from leaf {self.log_size}{after} on were removed"
            )
        if self.exact:
            return (
                f"the event at position {self.first_position} (leaf {self.first_leaf}) no "
                f"longer matches {cp}: it was changed, removed or replaced after signing"
            )
        if self.kind == TRUNCATED:
            return (
                f"{cp} covers {self.kept_size} events but the log holds {self.log_size} (the "
                f"one of size {self.matched_size} still matches): an event among positions "
                f"{self.first_position}..{self.last_position} (leaves {self.first_leaf}.."
                f"{self.last_leaf - 1}) was changed, or the events from leaf "
                f"{self.log_size} on were removed; checkpoints kept more often narrow it"
            )
        return (
            f"{cp} no longer matches (the one of size {self.matched_size} still does): the "
            f"first change is an event among positions {self.first_position}.."
            f"{self.last_position} (leaves {self.first_leaf}..{self.last_leaf}); "
            "checkpoints kept more often narrow it"
        )


def split_notes(text: str) -> list[str]:
    """The signed notes in a file of notes written one after another (as served)."""
    notes: list[str] = []
    current: list[str] = []
    in_signatures = False
    for line in text.splitlines(keepends=True):
        if in_signatures and not line.startswith(_SIGNATURE):
            notes.append("".join(current))
            current, in_signatures = [], False
        if not current and not line.strip():
            continue  # blank lines between notes
        current.append(line)
        if line in ("\n", "\r\n") and len(current) > 1:
            in_signatures = True
    if current:
        if not in_signatures:
            raise NoteError("the last note has no signature block")
        notes.append("".join(current))
    return notes


def first_divergence(events: Iterable[StoredEvent], kept: Sequence[KeptRoot]) -> Divergence | None:
    """Hash the events as leaves; the first kept root they no longer reproduce, or None.

    Stops at the first kept root that differs: the events after it are not read.
    """
    pending = sorted((k for k in kept if k.size > 0), key=lambda k: k.size)
    tree, matched, due = CompactRange(), 0, 0
    first_position: int | None = None
    last_position: int | None = None
    for e in events:
        if due == len(pending):
            return None
        if tree.size == matched:
            first_position = e.position  # the first leaf no kept root vouches for yet
        h = hashlib.sha256(b"\x00" + e.head)
        h.update(e.payload)
        tree.append_leaf(h.digest())
        last_position = e.position
        while due < len(pending) and pending[due].size == tree.size:
            if tree.root() != pending[due].root:
                return Divergence(
                    REWRITTEN, pending[due].size, matched, None, matched, tree.size - 1,
                    first_position, last_position,
                )  # fmt: skip
            matched, due = tree.size, due + 1
    if due == len(pending):
        return None
    return Divergence(
        TRUNCATED, pending[due].size, matched, tree.size, matched, tree.size,
        first_position if matched < tree.size else None, last_position,
    )  # fmt: skip
