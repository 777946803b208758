"""Where a self-update cycle may read and write: its clone, minus what is off-limits.

The path half of the self-update rules (domain/self_update_policy.py): each path the shell
analysis found a call reading or writing is judged here (``judge_use``). It refuses paths
outside the clone, under a protected root, credential and git-internal files, the agents'
own settings, and writes to what instructs an agent. Judging is lexical: symlinks are not
followed.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Sequence

from domain.protected_paths import PROTECTED_COMPONENTS, PROTECTED_NAMES, is_protected
from domain.shell.allowlist import (
    UNRESOLVED_PATH_EXPANSION,
    words,
)
from domain.shell.paths import (
    DEVICES,
    GLOB,
    normalize,
    parent_glob,
    within,
)
from domain.shell.result import PathUse
from domain.shell.verdict import (
    CREDENTIALS,
    OUTSIDE_CLONE,
    PROTECTED_PATH,
    Denial,
    quoted,
    refused,
)

_SECRET_FILES = words(
    ".env .envrc .ssh .aws .gnupg .netrc _netrc .npmrc .pypirc .pgpass .git-credentials .kube"
)
_KEY_PREFIXES = ("id_rsa", "id_dsa", "id_ecdsa", "id_ed25519")
_KEY_SUFFIXES = (".pem", ".key", ".p12", ".pfx")
# What a glob has to be able to match to count as reaching a credential file.
_SECRET_SAMPLES = (
    *sorted(_SECRET_FILES),
    ".env.local",
    *_KEY_PREFIXES,
    "id_rsa.pub",
    "server.pem",
    "server.key",
    "cert.p12",
    "cert.pfx",
)
_SECRET_PAIRS = ((".git", "config"), (".git", "hooks"), (".docker", "config.json"))
# The agents' own hook, permission and MCP settings (None: the whole directory).
_AGENT_CONFIG: tuple[tuple[str, str | None], ...] = (
    (".claude", "settings.json"),
    (".claude", "settings.local.json"),
    (".gemini", "settings.json"),
    (".github", "hooks"),
    (".codex", None),
    (".copilot", None),
)
_AGENT_FILES = frozenset({".mcp.json"})
_SPECIAL_COMPONENTS = frozenset(
    {first for first, _ in _SECRET_PAIRS} | {first for first, _ in _AGENT_CONFIG} | _AGENT_FILES
)


def _matches(component: str, name: str) -> bool:
    """A path component (perhaps a glob) that is, or can match, the given name."""
    if GLOB.search(component):
        return component not in ("*", "**") and fnmatch.fnmatchcase(name, component)
    return component == name


def _secret_name(component: str) -> bool:
    if GLOB.search(component):
        return component not in ("*", "**") and any(
            fnmatch.fnmatchcase(sample, component) for sample in _SECRET_SAMPLES
        )
    return (
        component in _SECRET_FILES
        or component.startswith(".env.")
        or component.startswith(_KEY_PREFIXES)
        or component.endswith(_KEY_SUFFIXES)
    )


class Scope:
    """Where a self-update cycle may read and write: its clone, minus what is off-limits."""

    def __init__(self, clone_root: str, protected_roots: Sequence[str]) -> None:
        if not clone_root.startswith("/"):
            raise ValueError(f"clone_root must be an absolute path, not {clone_root!r}")
        for root in protected_roots:
            if not root.startswith("/"):
                raise ValueError(f"protected roots must be absolute paths, not {root!r}")
        self.clone = normalize(clone_root)
        self.protected = tuple(normalize(root) for root in protected_roots)

    def resolve(self, value: str, cwd: str) -> str:
        return normalize(value if value.startswith("/") else f"{cwd}/{value}")

    def judge_use(self, use: PathUse) -> Denial | None:
        """Judge a path the shell analysis found (absolute, or outside: ``~``, ``$TMPDIR``)."""
        path = use.path
        if not path.startswith("/"):
            return self._outside(path)
        # Named as the agent would write it: relative to the clone when inside it.
        shown = path[len(self.clone) + 1 :] or "." if within(path, self.clone) else path
        if any(parent_glob(part) for part in path.split("/")):
            return refused(
                UNRESOLVED_PATH_EXPANSION, shown, "its pattern can match `..`, out of the clone"
            )
        denial = self.judge(path, shown, write=use.write)
        if denial and use.loop:
            return refused(
                UNRESOLVED_PATH_EXPANSION,
                shown,
                f"a loop writes through its variable to it ({denial.rule}), which the "
                "self-update policy refuses; write each path out",
            )
        return denial

    def judge(self, path: str, shown: str, *, write: bool = False) -> Denial | None:
        """Judge a normalized absolute path."""
        if path in DEVICES or path.startswith("/dev/fd/"):
            return None
        inside = within(path, self.clone)
        for root in self.protected:
            if within(path, root) and not (inside and within(self.clone, root)):
                return Denial(
                    PROTECTED_PATH,
                    f"{quoted(shown)} is inside {root}, which a self-update cycle may never "
                    "read or write.",
                )
        if not inside:
            return self._outside(shown)
        return self._inside(path[len(self.clone) :], shown) or (
            _protected_write(path[len(self.clone) :], shown) if write else None
        )

    def _outside(self, shown: str) -> Denial:
        return Denial(
            OUTSIDE_CLONE,
            f"{quoted(shown)} is outside the clone {self.clone}; a self-update cycle may read "
            "and write only inside its clone.",
        )

    def _inside(self, relative: str, shown: str) -> Denial | None:
        parts = [p.lower() for p in relative.split("/") if p and p != "."]
        for i, part in enumerate(parts):
            if part not in _SPECIAL_COMPONENTS and not GLOB.search(part) and not _secret_name(part):
                continue  # the common case: an ordinary name
            following = parts[i + 1] if i + 1 < len(parts) else None
            if _secret_name(part) or any(
                _matches(part, first) and following is not None and _matches(following, second)
                for first, second in _SECRET_PAIRS
            ):
                return Denial(
                    CREDENTIALS,
                    f"{quoted(shown)} is a credential or git-internal file; a self-update "
                    "cycle may not read or write it, even inside its clone.",
                )
            if any(_matches(part, name) for name in _AGENT_FILES) or any(
                _matches(part, first)
                and (second is None or (following is not None and _matches(following, second)))
                for first, second in _AGENT_CONFIG
            ):
                return Denial(
                    PROTECTED_PATH,
                    f"{quoted(shown)} holds an agent's hook, permission or MCP settings, which "
                    "a self-update cycle may not touch.",
                )
        return None


_PROTECTED_SAMPLES = PROTECTED_COMPONENTS | PROTECTED_NAMES | {".github"}


def _protected_write(relative: str, shown: str) -> Denial | None:
    """A write to what instructs an agent, git's own files or CI (domain/protected_paths)."""
    parts = [p for p in relative.split("/") if p and p != "."]
    if is_protected("/".join(parts) or ".") or any(
        GLOB.search(part) and any(_matches(part.lower(), name) for name in _PROTECTED_SAMPLES)
        for part in parts
    ):
        return Denial(
            PROTECTED_PATH,
            f"{quoted(shown)} is an agent instruction, git or CI file; a self-update cycle "
            "may read it with a command that only reads, never write it.",
        )
    return None
