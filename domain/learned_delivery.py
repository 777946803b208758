"""What an agent is told of what it learned: its targets composed into one bounded text.

Pure. The composition is stable (the same targets give the same text, byte for byte, in
kind then key order) so a runtime that caches its context sees no churn, and it is
bounded: when the targets do not all fit, the lessons changed longest ago give way
first, so the newest evidence always reaches the agent. What was carried is listed item
by item (SPEC §8, the delivery item) with the digest of exactly the text delivered.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from domain.learned_target import content_digest

DEFAULT_BUDGET_BYTES = 16 * 1024
HEADER = (
    "Learned guidance (Tachograph): lessons from this agent's earlier turns and edits "
    "by its operators."
)
_KIND_ORDER = {"overlay": 0, "skill": 1, "fact": 2}
_BLOCK_SEPARATOR = "\n\n"


@dataclass(frozen=True, slots=True)
class LearnedEntry:
    """One target's effective content, as the composition needs it."""

    target_id: str
    kind: str
    agent_id: str
    key: str
    content: str
    # The target's latest revision; None while a person's edit is what it holds.
    revision_id: str | None
    # Log position of the change that set this content: the higher, the newer.
    position: int

    @property
    def order(self) -> tuple[int, str, str]:
        return (_KIND_ORDER.get(self.kind, len(_KIND_ORDER)), self.key, self.target_id)


@dataclass(frozen=True, slots=True)
class Composed:
    """The text to deliver (None when nothing is) and one item per target it carries."""

    text: str | None
    items: tuple[dict[str, Any], ...] = ()

    @property
    def size(self) -> int:
        return len(self.text.encode("utf-8")) if self.text else 0


NOTHING = Composed(None, ())


def block(entry: LearnedEntry, content: str) -> str:
    """One target's part of the text: a title line naming it, then its content."""
    return f"[{entry.kind} {entry.key}]\n{content}"


def _size(text: str) -> int:
    return len(text.encode("utf-8"))


def _newest_lines(entry: LearnedEntry, room: int) -> str | None:
    """An overlay's newest instructions (its last lines) that fit in `room` bytes."""
    if entry.kind != "overlay":
        return None
    kept: list[str] = []
    used = _size(block(entry, ""))
    for line in reversed([line for line in entry.content.split("\n") if line]):
        cost = _size(line) + (1 if kept else 0)
        if used + cost > room:
            break
        kept.append(line)
        used += cost
    return "\n".join(reversed(kept)) if kept else None


def compose(targets: Iterable[LearnedEntry], budget_bytes: int = DEFAULT_BUDGET_BYTES) -> Composed:
    """The agent's learned text within `budget_bytes` (UTF-8), and what it carries.

    Targets are admitted newest first while they fit; one that does not fit whole is
    left out (an overlay keeps its newest lines instead, when only part of it fits),
    then the admitted ones are written in the stable order.
    """
    entries = [t for t in targets if t.content and t.content.strip()]
    fixed = _size(HEADER)
    if not entries or budget_bytes <= fixed:
        return NOTHING
    chosen: list[tuple[LearnedEntry, str]] = []
    used = fixed
    for entry in sorted(entries, key=lambda t: (-t.position, t.order)):
        room = budget_bytes - used - _size(_BLOCK_SEPARATOR)
        text = block(entry, entry.content)
        if _size(text) <= room:
            chosen.append((entry, entry.content))
            used += _size(_BLOCK_SEPARATOR) + _size(text)
            continue
        partial = _newest_lines(entry, room)
        if partial is not None:
            chosen.append((entry, partial))
            break  # what is left cannot hold more than the rest of this one did
    if not chosen:
        return NOTHING
    chosen.sort(key=lambda pair: pair[0].order)
    text = _BLOCK_SEPARATOR.join([HEADER, *(block(entry, content) for entry, content in chosen)])
    items = tuple(
        {
            "target_id": entry.target_id,
            "kind": entry.kind,
            "agent_id": entry.agent_id,
            "key": entry.key,
            "revision_id": entry.revision_id,
            "content_digest": content_digest(content),
        }
        for entry, content in chosen
    )
    return Composed(text, items)


def combine(context: str | None, learned: str | None, separator: str = "\n\n") -> str | None:
    """A managed handlers' context and the learned text, in that order, as one."""
    if context and learned:
        return f"{context}{separator}{learned}"
    return context or learned or None
