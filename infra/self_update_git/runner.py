"""Running git hardened: the one way this package starts git, and what it raises.

Every call goes through `git` here so that none can skip the protections the package
docstring describes: an argv (never a shell), the `HARDENING` overrides, a scrubbed
environment with an empty HOME, a timeout that kills git with every helper it started,
and a cap on what git may write. `git_repo`, `git_clone` and `git_tree` fix where git
looks (the registered checkout, the clone, or only the clone's objects), so no
repository discovery can lead elsewhere. Git's own error classes live here because the
runner is what raises them; the refusals of the operations subclass `GitError`.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import signal
import subprocess
import tempfile
import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from infra.self_update_git.results import Clone

GIT_TIMEOUT_S = 120.0
CLONE_TIMEOUT_S = 900.0
OUTPUT_CAP_BYTES = 16 * 1024 * 1024  # any output beyond this is an error, except the patch
STDERR_TAIL_CHARS = 2000

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
        said = last_line(stderr) or "no message"
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


def last_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1].removeprefix("fatal: ") if lines else ""


# Running git


@dataclass(frozen=True)
class GitOutput:
    args: tuple[str, ...]
    code: int
    stdout: bytes  # at most `keep` bytes
    size: int  # bytes git wrote to stdout
    digest: str  # "sha256:<hex>" of everything git wrote to stdout
    nuls: int  # NUL bytes git wrote to stdout (entries of a -z listing)
    stderr: str  # its tail

    def text(self) -> str:
        return self.stdout.decode("utf-8", "surrogateescape")


def ok(out: GitOutput) -> bool:
    return out.code == 0


def check(out: GitOutput) -> GitOutput:
    if out.code != 0:
        raise GitCommandError(out.args, out.code, out.stderr)
    return out


@contextlib.contextmanager
def scratch() -> Iterator[Path]:
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


def git_repo(
    repo: Path,
    home: Path,
    *args: str,
    timeout: float = GIT_TIMEOUT_S,
    keep: int = OUTPUT_CAP_BYTES,
    truncate: bool = False,
) -> GitOutput:
    """In the registered checkout; the ceiling stops discovery from reaching a parent."""
    return git(
        ("-C", str(repo)),
        args,
        cwd=repo,
        home=home,
        env={"GIT_CEILING_DIRECTORIES": str(repo.parent)},
        timeout=timeout,
        keep=keep,
        truncate=truncate,
    )


def git_clone(
    clone: Clone, home: Path, *args: str, keep: int = OUTPUT_CAP_BYTES, truncate: bool = False
) -> GitOutput:
    """In the clone, naming its .git and work tree so no discovery can lead elsewhere."""
    return git(
        (f"--git-dir={clone.path / '.git'}", f"--work-tree={clone.path}"),
        args,
        cwd=clone.path,
        home=home,
        keep=keep,
        truncate=truncate,
    )


def git_tree(
    clone: Clone, home: Path, *args: str, keep: int = OUTPUT_CAP_BYTES, truncate: bool = False
) -> GitOutput:
    """On the clone's objects only: an empty work tree (also the cwd, from which git
    looks for .gitattributes) and no index (defence in depth: git 2.39 does not fall
    back to the index here), so no attributes file the agent wrote shapes the output."""
    empty = home / "empty-tree"
    empty.mkdir(exist_ok=True)
    return git(
        (f"--git-dir={clone.path / '.git'}", f"--work-tree={empty}"),
        args,
        cwd=empty,
        home=home,
        env={"GIT_INDEX_FILE": str(home / "no-index")},
        keep=keep,
        truncate=truncate,
    )


def git(
    where: Sequence[str],
    args: Sequence[str],
    *,
    cwd: Path,
    home: Path,
    env: Mapping[str, str] | None = None,
    timeout: float = GIT_TIMEOUT_S,
    keep: int = OUTPUT_CAP_BYTES,
    truncate: bool = False,
) -> GitOutput:
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
    return GitOutput(command, code, bytes(kept), size, f"sha256:{hasher.hexdigest()}", nuls, stderr)
