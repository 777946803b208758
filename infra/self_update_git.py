"""The git side of a self-update cycle: a contained clone in, one reviewed commit out.

A cycle never lets the agent work in the operator's registered checkout. Instead:

1. `checkout_state(repo)` says whether the checkout may be cycled (a git work tree,
   at its top, with commits and no staged, unstaged or untracked change outside
   ignored files) and captures its HEAD, branch and a digest of its remotes.
2. `prepare_clone(repo, dest, branch, base=head)` makes a full, independent copy
   (`git clone --no-local`: a pack made by upload-pack, so no hardlinks, no
   alternates, nothing copied from the source's object directory but reachable
   objects) on a new branch at `base`, with every remote removed and a local
   committer identity, so the agent can commit without any global configuration.
3. `inspect_change(clone)` makes the bounded patch of `base..HEAD` and its digest and
   says what is wrong with it, if anything (`Change.problem`): among others, a path
   that `domain.protected_paths.is_protected` names (secrets, git's machinery, the
   agents' instruction and configuration files, CI) touched by any commit.
   `prepare_review(repo, change, dest, branch)` makes the reviewer's working tree: a
   fresh clone of the registered repository at the base with exactly the inspected
   patch applied, checked to be HEAD's tree, so nothing else of the clone reaches it.
4. `import_commit(repo, clone, ...)` recomputes all of that immediately before it
   mutates anything, refuses (`ImportRefused`) unless it is exactly what was
   reviewed, then fetches the commit's objects into the registered repository and
   creates exactly one ref under `refs/tachograph/self-update/` with a create-only
   `update-ref`. The working tree, index, HEAD, branches, tags, FETCH_HEAD and
   config of the registered repository are never written.
5. `discard_ref(repo, ref)` deletes such a ref again (and nothing else).

Digests are `sha256:<hex>` (as learned-target digests are): `Change.digest` is the
SHA-256 of the patch bytes exactly as `Change.patch` holds them when within the
limit, so anyone holding the patch can check it; `remotes_digest` is the SHA-256 of
the sorted lines of `git remote -v` (URLs are hashed, never shown).

The patch is `git diff --binary --full-index --no-renames --no-ext-diff --no-textconv`
of `base` against `HEAD`, made in an attribute-free view of the clone (an empty work
tree and no index, so neither a `.gitattributes` the agent wrote nor a diff driver
can change how the patch looks or hide a text file as binary). It includes
deletions, mode changes, symlinks and binary files, and `git apply` accepts it.

Hardening. Every git call runs with a scrubbed environment: nothing from the
server's environment but `PATH` (no `GIT_DIR`, `GIT_SSH_COMMAND`, credentials, ...),
`HOME` and `XDG_CONFIG_HOME` in a fresh empty directory, no system or global config
(`GIT_CONFIG_NOSYSTEM`, `GIT_CONFIG_GLOBAL=/dev/null`), no prompts, no replace
objects, no grafts, no optional locks (so `git status` never rewrites an index), and
only the `file` protocol. `HARDENING` is passed with `-c` to every call, each with a
timeout; a failure raises `GitError` with the tail of git's stderr.

The clone's `.git` has been writable by the agent, and a repository's own config can
make git run commands (`core.fsmonitor`, `core.hooksPath`, `diff.<x>.textconv`,
`filter.<x>.clean`, `include.path`/`includeIf` pulling in any of those, ...). The
`-c` overrides cover the keys we know; because filter and diff driver names are open
ended, inspection also rewrites the clone's `.git/config` to the one
`prepare_clone` wrote and removes `config.worktree`, `info/attributes`,
`info/exclude` and planted hooks (`Change.restored` names what it put back), and it
refuses a clone whose `.git` borrows from elsewhere (alternates, `commondir`,
`shallow`, grafts, symbolic links at the top of `.git`, `.git` not a directory).

Consequences and limits:
- The operator's global and system git configuration is not read, so a global
  excludes file does not hide files from the cleanliness check (use
  `.git/info/exclude`), and global filters (e.g. Git LFS) do not run: an LFS repository
  is cloned with pointer files. Submodules are not cloned.
- This is containment, not a sandbox: the agent runs as the same OS user. It keeps
  the agent's git activity away from the registered checkout and makes sure only the
  reviewed, digest-checked commit lands, as a ref nobody checks out.
- The digest covers the net patch; the imported ref also carries the intermediate
  commits of `base..HEAD`. Protected paths are checked in every one of them, but
  their other contents are not part of the review.
- The clone's canonical config assumes a POSIX filesystem with exec bits
  (`core.filemode = true`), as the server's Linux image has.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from domain.protected_paths import is_protected

DEFAULT_LIMIT_BYTES = 256 * 1024
REF_PREFIX = "refs/tachograph/self-update/"
COMMITTER_NAME = "Tachograph self-update"
COMMITTER_EMAIL = "self-update@tachograph.invalid"
GIT_TIMEOUT_S = 120.0
CLONE_TIMEOUT_S = 900.0
OUTPUT_CAP_BYTES = 16 * 1024 * 1024  # any output beyond this is an error, except the patch
STATUS_KEEP = 1024 * 1024  # of a long status listing only the first entries are shown
STDERR_TAIL_CHARS = 2000
DIRTY_PATHS_SHOWN = 5

# Passed as `-c` to every git call. Command-line config wins over every config file,
# including files an agent may have edited or included.
HARDENING: tuple[str, ...] = (
    # No hook runs: the clone's may have been planted by the agent, and the registered
    # repository's would run on our ref update (reference-transaction).
    "core.hooksPath=/dev/null",
    # core.fsmonitor names a command `git status` runs.
    "core.fsmonitor=false",
    "core.untrackedCache=false",
    "core.attributesFile=/dev/null",
    # Local paths only: nothing is ever fetched from, or pushed to, a network.
    "protocol.allow=never",
    "protocol.file.allow=always",
    # Check every object that arrives, and run no background work after a fetch.
    "transfer.fsckObjects=true",
    "gc.auto=0",
    "maintenance.auto=false",
    "fetch.writeCommitGraph=false",
    "fetch.recurseSubmodules=false",
    "submodule.recurse=false",
    "core.pager=cat",
    "color.ui=false",
)

_FULL_SHA = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")
# Files the agent may have planted in the clone's .git that make git read objects,
# refs or history from somewhere else: refused rather than repaired.
_BORROWING = (
    "commondir",
    "shallow",
    "info/grafts",
    "objects/info/alternates",
    "objects/info/http-alternates",
)
# Files that only change how git behaves, none of which prepare_clone writes:
# removed before inspection.
_REMOVED = ("config.worktree", "info/attributes", "info/exclude", "info/sparse-checkout")

# Errors


class GitError(Exception):
    """Git could not do what was asked (or the request itself was unfit)."""


class GitCommandError(GitError):
    """A git command exited non-zero; `stderr` is the tail of what it said."""

    def __init__(
        self, command: Sequence[str], returncode: int, stderr: str, message: str | None = None
    ) -> None:
        self.command = tuple(command)
        self.returncode = returncode
        self.stderr = stderr
        said = _last_line(stderr) or "no message"
        name = " ".join(self.command[:2])
        super().__init__(message or f"git {name} failed (exit {returncode}): {said}")


class GitTimeout(GitCommandError):
    """A git command ran out of time and was killed with its children."""

    def __init__(self, command: Sequence[str], timeout: float, stderr: str) -> None:
        name = " ".join(tuple(command)[:2])
        super().__init__(
            command, -signal.SIGKILL, stderr, f"git {name} timed out after {timeout:g} s"
        )
        self.timeout = timeout


class CloneRefused(GitError):
    """prepare_clone refused its arguments (dest not empty, base not a commit, ...)."""


class ReviewRefused(GitError):
    """prepare_review could not make the reviewer's tree be exactly the reviewed change."""


class ImportRefused(GitError):
    """import_commit found the change is not exactly what was reviewed; nothing moved."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


# Results


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


# Public API


def checkout_state(repo: Path) -> CheckoutState:
    """Eligibility of the registered checkout and its captured HEAD, branch and remotes."""
    repo = Path(os.path.abspath(repo))
    if not repo.is_dir():
        return CheckoutState(False, False, f"{repo} is not a directory.", None, None, None)
    with _scratch() as home:
        inside = _git_repo(repo, home, "rev-parse", "--is-inside-work-tree", "--show-toplevel")
        if inside.code != 0:
            said = _last_line(inside.stderr) or "no repository found"
            reason = f"{repo} is not a git repository ({said})."
            return CheckoutState(False, False, reason, None, None, None)
        lines = inside.text().splitlines()
        if lines[:1] != ["true"] or len(lines) < 2:
            reason = f"{repo} is a bare repository or has no work tree."
            return CheckoutState(False, False, reason, None, None, None)
        top = lines[1]
        if os.path.realpath(top) != os.path.realpath(repo):
            reason = f"{repo} is inside the git work tree at {top}, not at its top."
            return CheckoutState(False, False, reason, None, None, None)
        remotes = _remotes_digest(repo, home)
        branch = _branch(_git_repo(repo, home, "symbolic-ref", "--quiet", "HEAD"))
        head = _resolve(_git_repo(repo, home, "rev-parse", "--verify", "--quiet", "HEAD^{commit}"))
        if head is None:
            reason = f"{repo} has no commits yet."
            return CheckoutState(True, False, reason, None, branch, remotes)
        dirty = _status(lambda *a: _git_repo(repo, home, *a, keep=STATUS_KEEP, truncate=True))
        if dirty:
            reason = f"the working tree of {repo} is not clean: {dirty}."
            return CheckoutState(True, False, reason, head, branch, remotes)
    remark = None if branch else f"HEAD is detached at {head[:12]}; the cycle starts from there."
    return CheckoutState(True, True, remark, head, branch, remotes)


def prepare_clone(repo: Path, dest: Path, branch: str, *, base: str | None = None) -> Clone:
    """Clone `repo` into the fresh directory `dest` on a new `branch` at `base`.

    `base` should be the `head` that `checkout_state` captured (so the cycle starts
    from the commit that was checked); by default it is the repository's HEAD now.
    """
    repo = Path(os.path.abspath(repo))
    dest = Path(os.path.abspath(dest))
    if dest.exists() and (dest.is_symlink() or not dest.is_dir() or any(dest.iterdir())):
        raise CloneRefused(f"{dest} must be a new or empty directory.")
    real_repo, real_dest = os.path.realpath(repo), os.path.realpath(dest)
    if os.path.commonpath([real_repo, real_dest]) in (real_repo, real_dest):
        raise CloneRefused(f"{dest} must lie outside the registered checkout {repo}.")
    with _scratch() as home:
        if not _valid_ref(repo, home, f"refs/heads/{branch}"):
            raise CloneRefused(f"{branch!r} is not a valid branch name.")
        if base is None:
            base = _resolve(_git_repo(repo, home, "rev-parse", "--verify", "--quiet", "HEAD"))
            if base is None:
                raise CloneRefused(f"{repo} has no commits yet.")
        if (
            not _FULL_SHA.fullmatch(base)
            or _resolve(
                _git_repo(repo, home, "rev-parse", "--verify", "--quiet", f"{base}^{{commit}}")
            )
            != base
        ):
            raise CloneRefused(f"{base!r} is not a commit of {repo}.")
        existed = dest.exists()
        dest.parent.mkdir(parents=True, exist_ok=True)
        template = home / "template"
        template.mkdir()
        try:
            # --no-local: objects arrive as a pack from upload-pack, never as copies or
            # hardlinks of the source's object files, and the source's alternates are
            # not inherited. The empty template plants no hooks and no info/exclude.
            _check(
                _git(
                    (),
                    [
                        "clone",
                        "--no-local",
                        "--no-checkout",
                        "--quiet",
                        f"--template={template}",
                        "--",
                        str(repo),
                        str(dest),
                    ],
                    cwd=dest.parent,
                    home=home,
                    timeout=CLONE_TIMEOUT_S,
                )
            )
            clone = Clone(dest, base, branch)
            if not _ok(_git_clone(clone, home, "cat-file", "-e", f"{base}^{{commit}}")):
                raise CloneRefused(
                    f"{base[:12]} is not reachable from the branches, tags or HEAD of {repo}."
                )
            for name in _check(_git_clone(clone, home, "remote")).text().split():
                _check(_git_clone(clone, home, "remote", "remove", name))
            _write_config(dest / ".git", base)
            _check(_git_clone(clone, home, "checkout", "--quiet", "--no-track", "-b", branch, base))
            if _borrowing(dest / ".git"):
                raise CloneRefused(f"the clone of {repo} borrows objects from elsewhere.")
        except BaseException:
            _remove(dest, keep_dir=existed)
            raise
    return clone


def inspect_change(clone: Clone, *, limit_bytes: int = DEFAULT_LIMIT_BYTES) -> Change:
    """The bounded patch of base..HEAD in the clone, its digest, and its problem if any."""
    with _scratch() as home:
        return _inspect(clone, home, limit_bytes)


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
    if len(change.patch) != change.size or _digest(change.patch) != change.digest:
        raise ReviewRefused("only part of the patch is at hand; it cannot be reviewed whole.")
    review = prepare_clone(repo, dest, branch, base=change.base)
    with _scratch() as home:
        try:
            patch = home / "change.patch"
            patch.write_bytes(change.patch)
            applied = _git_clone(review, home, "apply", "--index", "--", str(patch))
            if applied.code != 0:
                said = _last_line(applied.stderr) or "no message"
                raise ReviewRefused(f"the patch does not apply to {change.base[:12]}: {said}")
            _check(
                _git_clone(
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
            tree = _resolve(_git_clone(review, home, "rev-parse", "--verify", "HEAD^{tree}"))
            if tree is None or tree != change.tree:
                raise ReviewRefused(
                    f"the patch applied to {change.base[:12]} does not give the tree of "
                    f"{head[:12]}."
                )
        except BaseException:
            _remove(dest)
            raise
    return dest


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
    with _scratch() as home:
        _check_ref(repo, home, ref)
        if _ref_exists(repo, home, ref):
            raise ImportRefused(f"{ref} already exists in {repo}.")
        if _remotes_digest(repo, home) != expected_remotes_digest:
            raise ImportRefused(f"the remotes of {repo} changed since the cycle started.")
        change = _inspect(clone, home, limit_bytes)
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
        _check(
            _git_repo(
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
        fetched = _resolve(
            _git_repo(repo, home, "rev-parse", "--verify", "--quiet", f"{head}^{{commit}}")
        )
        if fetched != head:
            raise ImportRefused(f"the clone's branch moved while {head[:12]} was being fetched.")
        # Create-only: the zero old value makes update-ref fail if the ref appeared.
        update = _git_repo(
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
            _check(update)
    return head


def discard_ref(repo: Path, ref: str) -> str | None:
    """Delete a self-update ref; the commit it named, None when it did not exist.
    Other refs: ValueError."""
    repo = Path(os.path.abspath(repo))
    with _scratch() as home:
        _check_ref(repo, home, ref)
        target = _resolve(_git_repo(repo, home, "show-ref", "--verify", "--hash", "--", ref))
        if target is None:
            return None
        _check(_git_repo(repo, home, "update-ref", "--no-deref", "-d", ref, target))
    return target


# Inspection


def _inspect(clone: Clone, home: Path, limit: int) -> Change:
    base = clone.base
    git_dir = clone.path / ".git"
    change = Change(
        base=base,
        head=None,
        branch=None,
        patch=b"",
        size=0,
        digest=_digest(b""),
        files=(),
        commits=0,
        noop=False,
        clean=False,
        descendant=False,
        restored=(),
        problem=None,
    )
    borrowed = _borrowing(git_dir)
    if borrowed:
        problem = f"the clone's .git cannot be trusted: it {borrowed}."
        return replace(change, problem=problem)
    change = replace(change, restored=_restore(git_dir, base))

    head = _resolve(_git_clone(clone, home, "rev-parse", "--verify", "--quiet", "HEAD^{commit}"))
    if head is None:
        return replace(change, problem="the clone's HEAD does not name a commit.")
    branch = _branch(_git_clone(clone, home, "symbolic-ref", "--quiet", "HEAD"))
    tree = _resolve(_git_clone(clone, home, "rev-parse", "--verify", "--quiet", f"{head}^{{tree}}"))
    change = replace(change, head=head, branch=branch, tree=tree)
    if not _ok(_git_clone(clone, home, "cat-file", "-e", f"{base}^{{commit}}")):
        return replace(change, problem=f"the clone no longer has its base commit {base[:12]}.")
    ancestry = _git_clone(clone, home, "merge-base", "--is-ancestor", base, head)
    if ancestry.code not in (0, 1):
        _check(ancestry)
    dirty = _status(lambda *a: _git_clone(clone, home, *a, keep=STATUS_KEEP, truncate=True))
    change = replace(
        change,
        clean=not dirty,
        descendant=ancestry.code == 0,
        noop=head == base and not dirty,
    )
    touched: list[str] = []
    if head != base:
        diff = _check(
            _git_tree(
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
        names = _check(
            _git_tree(clone, home, "diff", "--name-status", "-z", "--no-renames", base, head, "--")
        ).stdout.split(b"\0")[:-1]
        counted = _check(_git_tree(clone, home, "rev-list", "--count", f"{base}..{head}"))
        # Paths each commit touched (against its first parent), so a protected file added
        # and removed again within the range is still seen.
        history = _check(
            _git_tree(
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
        touched = [_decode(name) for name in history.stdout.split(b"\0") if name]
        change = replace(
            change,
            patch=diff.stdout,
            size=diff.size,
            digest=diff.digest,
            files=tuple(
                (status.decode("ascii", "replace"), _decode(path))
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


def _borrowing(git_dir: Path) -> str | None:
    """What makes the clone's .git read from elsewhere (as "it ..."), if anything."""
    if git_dir.is_symlink() or not git_dir.is_dir():
        return "is not a directory"
    for entry in sorted(git_dir.iterdir()):
        if entry.is_symlink():
            return f"has a symbolic link at .git/{entry.name}"
    for name in _BORROWING:
        if os.path.lexists(git_dir / name):
            return f"has .git/{name}"
    return None


def _restore(git_dir: Path, base: str) -> tuple[str, ...]:
    """Put the clone's config back as prepare_clone wrote it and remove planted files."""
    restored: list[str] = []
    config = git_dir / "config"
    try:
        current = config.read_bytes()
    except OSError:
        current = None
    if current != _config_text(base).encode():
        _write_config(git_dir, base)
        restored.append("config")
    for name in _REMOVED:
        if os.path.lexists(git_dir / name):
            _remove(git_dir / name)
            restored.append(name)
    hooks = git_dir / "hooks"
    if hooks.is_dir():
        for hook in sorted(hooks.iterdir()):
            _remove(hook)
            restored.append(f"hooks/{hook.name}")
    return tuple(restored)


def _config_text(base: str) -> str:
    sha256 = len(base) == 64
    lines = [
        "[core]",
        f"\trepositoryformatversion = {1 if sha256 else 0}",
        "\tfilemode = true",
        "\tbare = false",
        "\tlogallrefupdates = true",
        # Also for the agent's own git commands and for the upload-pack that serves
        # import_commit's fetch (which does not see our -c overrides).
        "\thooksPath = /dev/null",
        "\tfsmonitor = false",
    ]
    if sha256:
        lines += ["[extensions]", "\tobjectformat = sha256"]
    lines += ["[user]", f"\tname = {COMMITTER_NAME}", f"\temail = {COMMITTER_EMAIL}", ""]
    return "\n".join(lines)


def _write_config(git_dir: Path, base: str) -> None:
    # A new file renamed over the old one: a symlink planted at .git/config is replaced,
    # never followed.
    fd, tmp = tempfile.mkstemp(dir=git_dir, prefix="config.", suffix=".tmp")
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write(_config_text(base))
    os.replace(tmp, git_dir / "config")


# Small readers


def _status(run: Callable[..., _Output]) -> str:
    """'' when clean, else up to five paths with what is wrong with each."""
    out = _check(
        run(
            "status",
            "--porcelain=v1",
            "-z",
            "--untracked-files=all",
            "--ignore-submodules=none",
            "--no-renames",
        )
    )
    if out.size == 0:
        return ""
    entries = [e for e in out.stdout.split(b"\0") if len(e) > 3]
    shown = []
    for entry in entries[:DIRTY_PATHS_SHOWN]:
        x, y = chr(entry[0]), chr(entry[1])
        if x == "?":
            what = "untracked"
        else:
            what = " and ".join(
                w for w, flag in (("staged", x != " "), ("modified", y != " ")) if flag
            )
        shown.append(f"{_decode(entry[3:])} ({what})")
    more = max(out.nuls, len(entries)) - len(shown)  # -z: one NUL per entry
    return ", ".join(shown) + (f" and {more} more" if more > 0 else "")


def _remotes_digest(repo: Path, home: Path) -> str:
    out = _check(_git_repo(repo, home, "remote", "-v"))
    lines = sorted(line for line in out.text().splitlines() if line)
    return _digest("\n".join(lines).encode())


def _check_ref(repo: Path, home: Path, ref: str) -> None:
    if not ref.startswith(REF_PREFIX) or len(ref) == len(REF_PREFIX):
        raise ValueError(f"{ref!r} is not a ref under {REF_PREFIX}.")
    if not _valid_ref(repo, home, ref):
        raise ValueError(f"{ref!r} is not a valid ref name.")


def _valid_ref(repo: Path, home: Path, name: str) -> bool:
    out = _git_repo(repo, home, "check-ref-format", name)
    if out.code not in (0, 1):  # 1: not a valid name; anything else: git itself failed
        _check(out)
    return out.code == 0


def _ref_exists(repo: Path, home: Path, ref: str) -> bool:
    return _ok(_git_repo(repo, home, "show-ref", "--verify", "--quiet", "--", ref))


def _resolve(out: _Output) -> str | None:
    text = out.text().strip()
    return text if out.code == 0 and _FULL_SHA.fullmatch(text) else None


def _branch(out: _Output) -> str | None:
    name = out.text().strip()
    if out.code != 0 or not name:
        return None
    return name.removeprefix("refs/heads/")


def _listing(paths: Sequence[str]) -> str:
    more = len(paths) - DIRTY_PATHS_SHOWN
    return ", ".join(paths[:DIRTY_PATHS_SHOWN]) + (f" and {more} more" if more > 0 else "")


def _amount(limit: int) -> str:
    return f"{limit // 1024} KiB" if limit % 1024 == 0 else f"{limit} byte"


def _digest(data: bytes) -> str:
    return f"sha256:{hashlib.sha256(data).hexdigest()}"


def _decode(raw: bytes) -> str:
    text = raw.decode("utf-8", "backslashreplace")
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1].removeprefix("fatal: ") if lines else ""


def _remove(path: Path, *, keep_dir: bool = False) -> None:
    if path.is_symlink() or not path.is_dir():
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        return
    if keep_dir:
        for child in path.iterdir():
            _remove(child)
    else:
        shutil.rmtree(path, ignore_errors=True)


# Running git


@dataclass(frozen=True)
class _Output:
    args: tuple[str, ...]
    code: int
    stdout: bytes  # at most `keep` bytes
    size: int  # bytes git wrote to stdout
    digest: str  # "sha256:<hex>" of everything git wrote to stdout
    nuls: int  # NUL bytes git wrote to stdout (entries of a -z listing)
    stderr: str  # its tail

    def text(self) -> str:
        return self.stdout.decode("utf-8", "surrogateescape")


def _ok(out: _Output) -> bool:
    return out.code == 0


def _check(out: _Output) -> _Output:
    if out.code != 0:
        raise GitCommandError(out.args, out.code, out.stderr)
    return out


@contextlib.contextmanager
def _scratch() -> Iterator[Path]:
    """An empty private directory: git's HOME, and room for an empty work tree."""
    with tempfile.TemporaryDirectory(prefix="tachograph-git-") as name:
        yield Path(name)


def _env(home: Path, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    env = {
        "PATH": os.environ.get("PATH", os.defpath),
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "LC_ALL": "C",
        "LANG": "C",
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_TERMINAL_PROMPT": "0",
        "GIT_ALLOW_PROTOCOL": "file",
        "GIT_PROTOCOL_FROM_USER": "0",
        "GIT_NO_REPLACE_OBJECTS": "1",
        "GIT_GRAFT_FILE": str(home / "no-grafts"),
        "GIT_ATTR_NOSYSTEM": "1",
        "GIT_OPTIONAL_LOCKS": "0",
    }
    env.update(extra or {})
    return env


def _git_repo(
    repo: Path,
    home: Path,
    *args: str,
    timeout: float = GIT_TIMEOUT_S,
    keep: int = OUTPUT_CAP_BYTES,
    truncate: bool = False,
) -> _Output:
    """In the registered checkout; the ceiling stops discovery from reaching a parent."""
    return _git(
        ("-C", str(repo)),
        args,
        cwd=repo,
        home=home,
        env={"GIT_CEILING_DIRECTORIES": str(repo.parent)},
        timeout=timeout,
        keep=keep,
        truncate=truncate,
    )


def _git_clone(
    clone: Clone, home: Path, *args: str, keep: int = OUTPUT_CAP_BYTES, truncate: bool = False
) -> _Output:
    """In the clone, naming its .git and work tree so no discovery can lead elsewhere."""
    return _git(
        (f"--git-dir={clone.path / '.git'}", f"--work-tree={clone.path}"),
        args,
        cwd=clone.path,
        home=home,
        keep=keep,
        truncate=truncate,
    )


def _git_tree(
    clone: Clone, home: Path, *args: str, keep: int = OUTPUT_CAP_BYTES, truncate: bool = False
) -> _Output:
    """On the clone's objects only: an empty work tree (also the cwd, from which git
    looks for .gitattributes) and no index (defence in depth: git 2.39 does not fall
    back to the index here), so no attributes file the agent wrote shapes the output."""
    empty = home / "empty-tree"
    empty.mkdir(exist_ok=True)
    return _git(
        (f"--git-dir={clone.path / '.git'}", f"--work-tree={empty}"),
        args,
        cwd=empty,
        home=home,
        env={"GIT_INDEX_FILE": str(home / "no-index")},
        keep=keep,
        truncate=truncate,
    )


def _git(
    where: Sequence[str],
    args: Sequence[str],
    *,
    cwd: Path,
    home: Path,
    env: Mapping[str, str] | None = None,
    timeout: float = GIT_TIMEOUT_S,
    keep: int = OUTPUT_CAP_BYTES,
    truncate: bool = False,
) -> _Output:
    """Run git (an argv, never a shell) with the hardened config and environment.

    stdout is hashed as it streams and at most `keep` bytes of it are held (more is an
    error unless `truncate`); stderr goes to a file so neither pipe can stall git. On
    timeout the whole process group (git and the helpers it started) is killed.
    """
    executable = shutil.which("git", path=os.environ.get("PATH", os.defpath))
    if executable is None:
        raise GitError("git is not installed (not found on PATH).")
    argv = [executable, "--no-pager", *where]
    for setting in HARDENING:
        argv += ["-c", setting]
    argv += args
    command = tuple(args)
    with tempfile.TemporaryFile() as err:
        try:
            proc = subprocess.Popen(
                argv,
                cwd=cwd,
                env=_env(home, env),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=err,
                start_new_session=True,
            )
        except OSError as exc:
            raise GitError(f"cannot run git: {exc}") from exc
        expired = threading.Event()

        def kill() -> None:
            if proc.returncode is None:
                with contextlib.suppress(OSError):
                    os.killpg(proc.pid, signal.SIGKILL)

        def expire() -> None:
            expired.set()
            kill()

        timer = threading.Timer(timeout, expire)
        timer.daemon = True
        timer.start()
        hasher = hashlib.sha256()
        kept = bytearray()
        size = nuls = 0
        try:
            assert proc.stdout is not None
            while chunk := proc.stdout.read(64 * 1024):
                hasher.update(chunk)
                size += len(chunk)
                nuls += chunk.count(b"\0")
                if len(kept) < keep:
                    kept += chunk[: keep - len(kept)]
                if size > keep and not truncate:
                    kill()
                    break
            code = proc.wait()
        finally:
            timer.cancel()
            if proc.poll() is None:
                kill()
                proc.wait()
            if proc.stdout is not None:
                proc.stdout.close()
        err.seek(0, os.SEEK_END)
        err.seek(max(0, err.tell() - STDERR_TAIL_CHARS * 4))
        stderr = err.read().decode("utf-8", "replace")[-STDERR_TAIL_CHARS:]
    name = " ".join(command[:2])
    if size > keep and not truncate:
        raise GitError(f"git {name} wrote more than {keep} bytes.")
    if expired.is_set():
        raise GitTimeout(command, timeout, stderr)
    return _Output(command, code, bytes(kept), size, f"sha256:{hasher.hexdigest()}", nuls, stderr)
