"""The only writes to the registered repository: one self-update ref in, or out.

`import_commit` lands the clone's reviewed HEAD as exactly one create-only ref under
`REF_PREFIX`, after recomputing the change and refusing anything that is not what was
reviewed; `discard_ref` deletes such a ref again. Both check the ref's name first, so
neither can be pointed at a branch, a tag or any other ref of the operator's.
"""

from __future__ import annotations

import os
from pathlib import Path

from infra.self_update_git.change import DEFAULT_LIMIT_BYTES, inspect_in_scratch
from infra.self_update_git.readers import remotes_digest, resolved_sha, valid_ref
from infra.self_update_git.results import Clone
from infra.self_update_git.runner import CLONE_TIMEOUT_S, GitError, check, git_repo, ok, scratch

REF_PREFIX = "refs/tachograph/self-update/"


class ImportRefused(GitError):
    """import_commit found the change is not exactly what was reviewed; nothing moved."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def import_commit(
    repo: Path,
    clone: Clone,
    *,
    expected_digest: str,
    expected_remotes_digest: str,
    ref: str,
    limit_bytes: int = DEFAULT_LIMIT_BYTES,
) -> str:
    """Land the clone's reviewed HEAD in `repo` as exactly `ref`; return its commit.

    Refuses (`ImportRefused`, nothing changed) unless, immediately before, the clone's
    change still has `expected_digest` and no problem, the registered repository's
    remotes still have `expected_remotes_digest` and `ref` does not exist yet.
    """
    repo = Path(os.path.abspath(repo))
    with scratch() as home:
        _check_ref(repo, home, ref)
        if _ref_exists(repo, home, ref):
            raise ImportRefused(f"{ref} already exists in {repo}.")
        if remotes_digest(repo, home) != expected_remotes_digest:
            raise ImportRefused(f"the remotes of {repo} changed since the cycle started.")
        change = inspect_in_scratch(clone, home, limit_bytes)
        if change.noop:
            raise ImportRefused("the clone has no change to import.")
        if change.problem is not None:
            raise ImportRefused(change.problem)
        if change.digest != expected_digest:
            raise ImportRefused(
                f"the change is not the one reviewed: its digest is {change.digest}, "
                f"the reviewed one {expected_digest}."
            )
        head = change.head
        assert head is not None  # no problem means HEAD is a commit
        # Objects only: no refspec destination and no FETCH_HEAD, so no ref, branch or
        # file outside the object store changes here.
        check(
            git_repo(
                repo,
                home,
                "fetch",
                "--quiet",
                "--no-tags",
                "--no-write-fetch-head",
                "--no-recurse-submodules",
                str(clone.path),
                f"refs/heads/{clone.branch}",
                timeout=CLONE_TIMEOUT_S,
            )
        )
        fetched = resolved_sha(
            git_repo(repo, home, "rev-parse", "--verify", "--quiet", f"{head}^{{commit}}")
        )
        if fetched != head:
            raise ImportRefused(f"the clone's branch moved while {head[:12]} was being fetched.")
        # Create-only: the zero old value makes update-ref fail if the ref appeared.
        update = git_repo(
            repo,
            home,
            "update-ref",
            "--no-deref",
            "-m",
            f"tachograph: self-update {change.digest}",
            ref,
            head,
            "0" * len(head),
        )
        if update.code != 0:
            if _ref_exists(repo, home, ref):
                raise ImportRefused(f"{ref} already exists in {repo}.")
            check(update)
    return head


def discard_ref(repo: Path, ref: str) -> str | None:
    """Delete a self-update ref; the commit it named, None when it did not exist.
    Other refs: ValueError."""
    repo = Path(os.path.abspath(repo))
    with scratch() as home:
        _check_ref(repo, home, ref)
        target = resolved_sha(git_repo(repo, home, "show-ref", "--verify", "--hash", "--", ref))
        if target is None:
            return None
        check(git_repo(repo, home, "update-ref", "--no-deref", "-d", ref, target))
    return target


def _check_ref(repo: Path, home: Path, ref: str) -> None:
    if not ref.startswith(REF_PREFIX) or len(ref) == len(REF_PREFIX):
        raise ValueError(f"{ref!r} is not a ref under {REF_PREFIX}.")
    if not valid_ref(repo, home, ref):
        raise ValueError(f"{ref!r} is not a valid ref name.")


def _ref_exists(repo: Path, home: Path, ref: str) -> bool:
    return ok(git_repo(repo, home, "show-ref", "--verify", "--quiet", "--", ref))
