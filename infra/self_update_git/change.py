"""The agent's change in the clone: what it is, what is wrong with it, and its review.

`inspect_change` makes the bounded patch of base..HEAD, its digest and its problem, if
any; `prepare_review` rebuilds exactly that patch on a fresh clone for the reviewer.
`inspect_in_scratch` is the same inspection with the caller's scratch HOME, so that
import_commit (refs.py) recomputes the change with exactly the checks that were
reviewed, immediately before it moves anything.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from domain.protected_paths import is_protected
from infra.self_update_git.clone import (
    borrowing_reason,
    prepare_clone,
    remove_path,
    restore_git_dir,
)
from infra.self_update_git.readers import (
    DIRTY_PATHS_SHOWN,
    STATUS_KEEP,
    branch_name,
    decode_printable,
    dirty_paths,
    resolved_sha,
    sha256_digest,
)
from infra.self_update_git.results import Change, Clone
from infra.self_update_git.runner import (
    GitError,
    check,
    git_clone,
    git_tree,
    last_line,
    ok,
    scratch,
)

DEFAULT_LIMIT_BYTES = 256 * 1024


class ReviewRefused(GitError):
    """prepare_review could not make the reviewer's tree be exactly the reviewed change."""


def inspect_change(clone: Clone, *, limit_bytes: int = DEFAULT_LIMIT_BYTES) -> Change:
    """The bounded patch of base..HEAD in the clone, its digest, and its problem if any."""
    with scratch() as home:
        return inspect_in_scratch(clone, home, limit_bytes)


def prepare_review(repo: Path, change: Change, dest: Path, branch: str) -> Path:
    """A fresh checkout for the reviewer: `repo` at the change's base with exactly the
    reviewed patch applied and committed on `branch`, in the new directory `dest`.

    Nothing of the clone reaches it but the patch's bytes (already digest-checked): not
    its objects, other branches, commit messages, untracked files or `.git`. Refused
    (`ReviewRefused`) unless the patch is whole, has its digest, applies, and gives the
    very tree of the inspected HEAD, so what the reviewer explores is what would land.
    """
    head = change.head
    if head is None or change.problem is not None:
        raise ReviewRefused("only a change without a problem is put to review.")
    if len(change.patch) != change.size or sha256_digest(change.patch) != change.digest:
        raise ReviewRefused("only part of the patch is at hand; it cannot be reviewed whole.")
    review = prepare_clone(repo, dest, branch, base=change.base)
    with scratch() as home:
        try:
            patch = home / "change.patch"
            patch.write_bytes(change.patch)
            applied = git_clone(review, home, "apply", "--index", "--", str(patch))
            if applied.code != 0:
                said = last_line(applied.stderr) or "no message"
                raise ReviewRefused(f"the patch does not apply to {change.base[:12]}: {said}")
            check(
                git_clone(
                    review,
                    home,
                    "commit",
                    "--quiet",
                    "--no-verify",
                    "--allow-empty",
                    "-m",
                    f"The change under review ({change.digest})",
                )
            )
            tree = resolved_sha(git_clone(review, home, "rev-parse", "--verify", "HEAD^{tree}"))
            if tree is None or tree != change.tree:
                raise ReviewRefused(
                    f"the patch applied to {change.base[:12]} does not give the tree of "
                    f"{head[:12]}."
                )
        except BaseException:
            remove_path(dest)
            raise
    return dest


# Inspection


def inspect_in_scratch(clone: Clone, home: Path, limit: int) -> Change:
    base = clone.base
    git_dir = clone.path / ".git"
    change = Change(
        base=base,
        head=None,
        branch=None,
        patch=b"",
        size=0,
        digest=sha256_digest(b""),
        files=(),
        commits=0,
        noop=False,
        clean=False,
        descendant=False,
        restored=(),
        problem=None,
    )
    borrowed = borrowing_reason(git_dir)
    if borrowed:
        problem = f"the clone's .git cannot be trusted: it {borrowed}."
        return replace(change, problem=problem)
    change = replace(change, restored=restore_git_dir(git_dir, base))

    head = resolved_sha(git_clone(clone, home, "rev-parse", "--verify", "--quiet", "HEAD^{commit}"))
    if head is None:
        return replace(change, problem="the clone's HEAD does not name a commit.")
    branch = branch_name(git_clone(clone, home, "symbolic-ref", "--quiet", "HEAD"))
    tree = resolved_sha(
        git_clone(clone, home, "rev-parse", "--verify", "--quiet", f"{head}^{{tree}}")
    )
    change = replace(change, head=head, branch=branch, tree=tree)
    if not ok(git_clone(clone, home, "cat-file", "-e", f"{base}^{{commit}}")):
        return replace(change, problem=f"the clone no longer has its base commit {base[:12]}.")
    ancestry = git_clone(clone, home, "merge-base", "--is-ancestor", base, head)
    if ancestry.code not in (0, 1):
        check(ancestry)
    dirty = dirty_paths(lambda *a: git_clone(clone, home, *a, keep=STATUS_KEEP, truncate=True))
    change = replace(
        change,
        clean=not dirty,
        descendant=ancestry.code == 0,
        noop=head == base and not dirty,
    )
    touched: list[str] = []
    if head != base:
        diff = check(
            git_tree(
                clone,
                home,
                "diff",
                "--binary",
                "--full-index",
                "--no-renames",
                "--no-ext-diff",
                "--no-textconv",
                "--no-color",
                "--src-prefix=a/",
                "--dst-prefix=b/",
                base,
                head,
                "--",
                keep=limit,
                truncate=True,
            )
        )
        names = check(
            git_tree(clone, home, "diff", "--name-status", "-z", "--no-renames", base, head, "--")
        ).stdout.split(b"\0")[:-1]
        counted = check(git_tree(clone, home, "rev-list", "--count", f"{base}..{head}"))
        # Paths each commit touched (against its first parent), so a protected file added
        # and removed again within the range is still seen.
        history = check(
            git_tree(
                clone,
                home,
                "log",
                "--format=",
                "--name-only",
                "-z",
                "--no-renames",
                "--diff-merges=first-parent",
                f"{base}..{head}",
                "--",
            )
        )
        touched = [decode_printable(name) for name in history.stdout.split(b"\0") if name]
        change = replace(
            change,
            patch=diff.stdout,
            size=diff.size,
            digest=diff.digest,
            files=tuple(
                (status.decode("ascii", "replace"), decode_printable(path))
                for status, path in zip(names[0::2], names[1::2], strict=True)
            ),
            commits=int(counted.text().strip() or "0"),
        )
    return replace(change, problem=_problem(clone, change, dirty, touched, limit))


def _problem(
    clone: Clone, change: Change, dirty: str, touched: list[str], limit: int
) -> str | None:
    """The first reason, most fundamental first, why the change must not be imported."""
    head = change.head or ""
    protected = sorted({p for p in [*(f[1] for f in change.files), *touched] if is_protected(p)})
    if change.branch != clone.branch:
        where = f"the branch {change.branch}" if change.branch else "a detached HEAD"
        return f"the clone's HEAD moved to {where}; the cycle's branch is {clone.branch}."
    if not change.descendant:
        return f"HEAD {head[:12]} is not a descendant of the base commit {clone.base[:12]}."
    if dirty:
        return f"the agent left uncommitted changes in the clone: {dirty}."
    if protected:
        return f"the patch touches a protected path: {_listing(protected)}."
    if change.size > limit:
        return f"the patch is {-(-change.size // 1024)} KiB, over the {_amount(limit)} limit."
    return None


def _listing(paths: Sequence[str]) -> str:
    more = len(paths) - DIRTY_PATHS_SHOWN
    return ", ".join(paths[:DIRTY_PATHS_SHOWN]) + (f" and {more} more" if more > 0 else "")


def _amount(limit: int) -> str:
    return f"{limit // 1024} KiB" if limit % 1024 == 0 else f"{limit} byte"
