"""Paths named by patch text (``*** Begin Patch`` and unified diffs) and by file tools."""

from __future__ import annotations

import re

from domain.shell.state import PathRules
from domain.shell.verdict import (
    OUTSIDE_CLONE,
    Denial,
    quoted,
)

PATCH_LINE = re.compile(r"^\*\*\* (?:Add File|Update File|Delete File|Move to): *(.+?)\s*$", re.M)
DIFF_LINE = re.compile(r"^(?:\+\+\+|---) (.+?)(?:\t.*)?\s*$", re.M)


def looks_like_patch(text: str) -> bool:
    head = text.lstrip()
    return head.startswith(("*** Begin Patch", "diff --git")) or (
        head.startswith("--- ") and "\n+++ " in head
    )


def patch_paths(scope: PathRules, text: str, cwd: str) -> Denial | None:
    """Judge every file a patch adds, updates, deletes or moves."""
    if "*** Begin Patch" in text:
        paths = PATCH_LINE.findall(text)
    else:
        paths = [re.sub(r"^[ab]/", "", p) for p in DIFF_LINE.findall(text)]
    for path in paths:
        denial = tool_path(scope, path, cwd)
        if denial:
            return denial
    return None


def tool_path(scope: PathRules, value: str, cwd: str, *, write: bool = True) -> Denial | None:
    """A path a file tool was given (tools do not expand, but ``~`` and ``$HOME`` count)."""
    if re.search(r"[\x00-\x1f]", value):
        return Denial(
            OUTSIDE_CLONE,
            f"{quoted(value)} contains control characters, so the self-update policy cannot "
            "tell where it points.",
        )
    path = re.sub(r"^(?:\$HOME|\$\{HOME\})(?=/|$)", "~", value.strip())
    return scope.check(path, cwd, value, write=write)
