"""What the git side hands back: plain, frozen values and nothing that runs git.

They sit in their own module because every other part of the package uses them (the
runner takes a `Clone` to know where to run), so none of those parts has to import
another just for a type.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class CheckoutState:
    """Whether a registered checkout may be cycled, and what it is at."""

    is_repo: bool
    clean: bool
    # Why it is not eligible; when it is, a remark worth recording (detached HEAD).
    reason: str | None
    head: str | None
    branch: str | None  # None when detached (or not a repository)
    remotes_digest: str | None  # "sha256:<hex>" of the sorted `git remote -v` lines

    @property
    def eligible(self) -> bool:
        return self.is_repo and self.clean and self.head is not None


@dataclass(frozen=True)
class Clone:
    """A contained clone: its work tree, the commit it started from, and its branch."""

    path: Path
    base: str
    branch: str


@dataclass(frozen=True)
class Change:
    """What the agent did in the clone, as base..HEAD, and what is wrong with it."""

    base: str
    head: str | None  # None when HEAD does not name a commit
    branch: str | None  # the clone's current branch, None when detached
    patch: bytes  # the whole patch, or its first `limit` bytes when over the limit
    size: int  # bytes of the whole patch
    digest: str  # "sha256:<hex>" of the whole patch
    files: tuple[tuple[str, str], ...]  # (A|D|M|T, path) of the net change
    commits: int  # commits in base..HEAD
    noop: bool  # HEAD is base and the tree is clean: nothing to import
    clean: bool  # no staged, unstaged or untracked change outside ignored files
    descendant: bool  # base is an ancestor of (or equal to) HEAD
    restored: tuple[str, ...]  # files under .git inspection put back or removed
    problem: str | None  # why it must not be imported; None when it may be
    tree: str | None = None  # the tree HEAD names
