"""Repository paths a self-update may not add, change or delete.

One pure predicate, `is_protected`, over a path relative to the repository's root. It
is the list inspection checks every commit of a cycle against, and the list an agent's
live tool calls can be checked against too. What it protects, and why:

- secrets and keys (`.env*`, SSH and cloud credentials, private keys and keystores):
  a cycle must never read them into a patch or plant one;
- git's own machinery, at any depth: `.git/` (config, hooks, `info/attributes`,
  `HEAD`, ...), `.gitattributes` (filters and diff drivers run commands and change
  how a patch looks), `.gitmodules`, and the hook directories projects point
  `core.hooksPath` at (`.githooks/`, `.husky/`);
- what instructs or configures a coding agent, at any depth, because the next run of
  an agent, the reviewer included, reads it as its own instructions: `CLAUDE.md`,
  `CLAUDE.local.md`, `AGENTS.md`, `AGENTS.override.md`, `GEMINI.md`, `.mcp.json`,
  and the directories `.claude/`, `.codex/`, `.gemini/`, `.copilot/`;
- CI that runs with the repository's secrets, and the repository's agent settings
  kept under `.github/` (at the root only, where those tools read them).

Paths are compared case-insensitively (`str.casefold`), so `Claude.md` or
`.GitHub/Workflows/x.yml` on a case-insensitive file system is caught as well. A path
is normalised first (`./a//b/../CLAUDE.md` is `a/CLAUDE.md`). The root itself (`.`)
is not protected. A path that is empty, absolute, or climbs out of the root is not a
repository path, and counts as protected (callers refuse rather than guess). The
normalisation is lexical (no symbolic link is resolved), and nothing else about file
systems is modelled (Unicode normalisation, Windows short names): the server runs on
Linux.

Standard library only; no I/O.
"""

from __future__ import annotations

import posixpath

# Any path component with one of these names: the directory and everything in it.
PROTECTED_COMPONENTS = frozenset(
    {
        ".git",
        ".githooks",
        ".husky",
        ".ssh",
        ".gnupg",
        ".aws",
        ".claude",
        ".codex",
        ".gemini",
        ".copilot",
    }
)
# Files an agent reads as instructions from its working directory, a parent of it or
# its HOME (Claude Code, Codex, Gemini CLI), compared case-folded.
AGENT_INSTRUCTION_NAMES = frozenset(
    {"claude.md", "claude.local.md", "agents.md", "agents.override.md", "gemini.md"}
)
# File names protected wherever they are.
PROTECTED_NAMES = AGENT_INSTRUCTION_NAMES | {".mcp.json", ".gitattributes", ".gitmodules"}
PROTECTED_NAME_PREFIXES = (".env", "id_rsa", "id_dsa", "id_ecdsa", "id_ed25519")
PROTECTED_SUFFIXES = (".pem", ".key", ".p12", ".pfx", ".jks", ".keystore")
# Paths from the root: the file, or the directory and everything below it.
PROTECTED_ROOT_PATHS = frozenset(
    {
        ".github/workflows",
        ".github/actions",
        ".github/hooks",
        ".github/instructions",
        ".github/copilot-instructions.md",
        ".circleci",
        ".gitlab-ci.yml",
    }
)


def is_protected(relative_path: str) -> bool:
    """Whether a path (POSIX, relative to the repository's root) may not be touched."""
    parts = _parts(relative_path)
    if parts is None:
        return True
    if parts == ["."]:
        return False
    name = parts[-1]
    return (
        any(part in PROTECTED_COMPONENTS for part in parts)
        or name in PROTECTED_NAMES
        or name.startswith(PROTECTED_NAME_PREFIXES)
        or name.endswith(PROTECTED_SUFFIXES)
        or any("/".join(parts[:n]) in PROTECTED_ROOT_PATHS for n in range(1, len(parts) + 1))
    )


def _parts(relative_path: str) -> list[str] | None:
    """The case-folded components of a normalised path inside the root, else None."""
    if not relative_path or relative_path.startswith("/"):
        return None
    normal = posixpath.normpath(relative_path)
    if normal == ".." or normal.startswith("../"):
        return None
    return normal.casefold().split("/")
