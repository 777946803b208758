"""The registered checkout and the contained clone made from it.

`checkout_state` decides whether a checkout may be cycled and `prepare_clone` makes the
independent clone the agent works in. The clone's canonical `.git/config` is written
here, and put back here (`restore_git_dir`) before every inspection, because the agent
has been able to write to that `.git`; `borrowing_reason` refuses a `.git` that would
make git read objects, refs or history from elsewhere. Keeping the writing and the
restoring of that config side by side is what keeps the two identical.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from pathlib import Path

from infra.self_update_git.readers import (
    FULL_SHA,
    STATUS_KEEP,
    branch_name,
    dirty_paths,
    remotes_digest,
    resolved_sha,
    valid_ref,
)
from infra.self_update_git.results import CheckoutState, Clone
from infra.self_update_git.runner import (
    CLONE_TIMEOUT_S,
    GitError,
    check,
    git,
    git_clone,
    git_repo,
    last_line,
    ok,
    scratch,
)

COMMITTER_NAME = "Tachograph self-update"
COMMITTER_EMAIL = "self-update@tachograph.invalid"

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


class CloneRefused(GitError):
    """prepare_clone refused its arguments (dest not empty, base not a commit, ...)."""


def checkout_state(repo: Path) -> CheckoutState:
    """Eligibility of the registered checkout and its captured HEAD, branch and remotes."""
    repo = Path(os.path.abspath(repo))
    if not repo.is_dir():
        return CheckoutState(False, False, f"{repo} is not a directory.", None, None, None)
    with scratch() as home:
        inside = git_repo(repo, home, "rev-parse", "--is-inside-work-tree", "--show-toplevel")
        if inside.code != 0:
            said = last_line(inside.stderr) or "no repository found"
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
        remotes = remotes_digest(repo, home)
        branch = branch_name(git_repo(repo, home, "symbolic-ref", "--quiet", "HEAD"))
        head = resolved_sha(
            git_repo(repo, home, "rev-parse", "--verify", "--quiet", "HEAD^{commit}")
        )
        if head is None:
            reason = f"{repo} has no commits yet."
            return CheckoutState(True, False, reason, None, branch, remotes)
        dirty = dirty_paths(lambda *a: git_repo(repo, home, *a, keep=STATUS_KEEP, truncate=True))
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
    with scratch() as home:
        if not valid_ref(repo, home, f"refs/heads/{branch}"):
            raise CloneRefused(f"{branch!r} is not a valid branch name.")
        if base is None:
            base = resolved_sha(git_repo(repo, home, "rev-parse", "--verify", "--quiet", "HEAD"))
            if base is None:
                raise CloneRefused(f"{repo} has no commits yet.")
        if (
            not FULL_SHA.fullmatch(base)
            or resolved_sha(
                git_repo(repo, home, "rev-parse", "--verify", "--quiet", f"{base}^{{commit}}")
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
            check(
                git(
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
            if not ok(git_clone(clone, home, "cat-file", "-e", f"{base}^{{commit}}")):
                raise CloneRefused(
                    f"{base[:12]} is not reachable from the branches, tags or HEAD of {repo}."
                )
            for name in check(git_clone(clone, home, "remote")).text().split():
                check(git_clone(clone, home, "remote", "remove", name))
            _write_config(dest / ".git", base)
            check(git_clone(clone, home, "checkout", "--quiet", "--no-track", "-b", branch, base))
            if borrowing_reason(dest / ".git"):
                raise CloneRefused(f"the clone of {repo} borrows objects from elsewhere.")
        except BaseException:
            remove_path(dest, keep_dir=existed)
            raise
    return clone


def borrowing_reason(git_dir: Path) -> str | None:
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


def restore_git_dir(git_dir: Path, base: str) -> tuple[str, ...]:
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
            remove_path(git_dir / name)
            restored.append(name)
    hooks = git_dir / "hooks"
    if hooks.is_dir():
        for hook in sorted(hooks.iterdir()):
            remove_path(hook)
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


def remove_path(path: Path, *, keep_dir: bool = False) -> None:
    if path.is_symlink() or not path.is_dir():
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        return
    if keep_dir:
        for child in path.iterdir():
            remove_path(child)
    else:
        shutil.rmtree(path, ignore_errors=True)
