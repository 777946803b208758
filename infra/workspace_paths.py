"""Containment of workspace paths below TACHOGRAPH_WORKSPACE_ROOT."""

from __future__ import annotations

import os
from pathlib import Path, PurePosixPath

from domain.errors import RuleViolation


class PathOutsideRoot(RuleViolation):
    """The path escapes the workspace root."""

    code = "path_outside_root"


def contained_path(root: Path, path: str) -> str:
    """Normalised relative path of an existing directory below root, or raise."""
    candidate = PurePosixPath(path)
    if candidate.is_absolute() or path.startswith("~") or "\\" in path:
        raise PathOutsideRoot(f"path {path!r} must be relative to the workspace root.")
    if ".." in candidate.parts:
        raise PathOutsideRoot(f"path {path!r} must not contain '..'.")
    real_root = Path(os.path.realpath(root))
    real = Path(os.path.realpath(real_root / candidate))
    if real != real_root and real_root not in real.parents:
        raise PathOutsideRoot(f"path {path!r} resolves outside the workspace root.")
    try:
        is_dir = real.is_dir()
    except OSError:  # e.g. a name too long for the filesystem: no such directory either
        is_dir = False
    if not is_dir:
        raise RuleViolation(
            f"path {path!r} is not an existing directory below the workspace root.",
        )
    normalised = str(candidate)
    return "." if normalised in ("", ".") else normalised
