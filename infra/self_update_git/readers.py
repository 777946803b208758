"""Small readers of git's answers, shared by the clone, the change and the refs.

Each turns one git output into the plain value the operations decide on (a full commit
id, a branch name, a digest, a short listing of what is not clean) so that every
operation reads git the same way, and a name, a status or a remote list is never
parsed twice in two slightly different ways.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from pathlib import Path

from infra.self_update_git.runner import GitOutput, check, git_repo

STATUS_KEEP = 1024 * 1024  # of a long status listing only the first entries are shown
DIRTY_PATHS_SHOWN = 5

FULL_SHA = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")


def dirty_paths(run: Callable[..., GitOutput]) -> str:
    """'' when clean, else up to five paths with what is wrong with each."""
    out = check(
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
        shown.append(f"{decode_printable(entry[3:])} ({what})")
    more = max(out.nuls, len(entries)) - len(shown)  # -z: one NUL per entry
    return ", ".join(shown) + (f" and {more} more" if more > 0 else "")


def remotes_digest(repo: Path, home: Path) -> str:
    out = check(git_repo(repo, home, "remote", "-v"))
    lines = sorted(line for line in out.text().splitlines() if line)
    return sha256_digest("\n".join(lines).encode())


def valid_ref(repo: Path, home: Path, name: str) -> bool:
    out = git_repo(repo, home, "check-ref-format", name)
    if out.code not in (0, 1):  # 1: not a valid name; anything else: git itself failed
        check(out)
    return out.code == 0


def resolved_sha(out: GitOutput) -> str | None:
    text = out.text().strip()
    return text if out.code == 0 and FULL_SHA.fullmatch(text) else None


def branch_name(out: GitOutput) -> str | None:
    name = out.text().strip()
    if out.code != 0 or not name:
        return None
    return name.removeprefix("refs/heads/")


def sha256_digest(data: bytes) -> str:
    return f"sha256:{hashlib.sha256(data).hexdigest()}"


def decode_printable(raw: bytes) -> str:
    text = raw.decode("utf-8", "backslashreplace")
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
