"""The hook files of agent runtimes: read, merge and write them without losing a user's own.

Claude Code, Codex and Gemini CLI nest hooks alike (`hooks.<Event>` is a list of matcher
groups, each with a `hooks` list of handlers); a file is read as a JSON object, changed
in memory and written atomically, or left untouched with a clear error.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any


class HookFileError(ValueError):
    """A hook file cannot be merged safely; it was left untouched."""


def remove_own_entries(hooks: dict[str, Any], is_own: Callable[[object], bool]) -> bool:
    """Drop own handlers, then the groups and event lists that this alone emptied."""
    changed = False
    for event in list(hooks):
        groups = hooks[event]
        if not isinstance(groups, list):
            continue
        kept, event_changed = _without_own_entries(groups, is_own)
        if not event_changed:
            continue
        changed = True
        if kept:
            hooks[event] = kept
        else:
            del hooks[event]
    return changed


def _without_own_entries(
    groups: list[Any], is_own: Callable[[object], bool]
) -> tuple[list[Any], bool]:
    """Return the matcher groups without own handlers, dropping groups left empty."""
    kept: list[Any] = []
    changed = False
    for group in groups:
        handlers = group.get("hooks") if isinstance(group, dict) else None
        if not isinstance(handlers, list) or not any(map(is_own, handlers)):
            kept.append(group)
            continue
        changed = True
        remaining = [h for h in handlers if not is_own(h)]
        if remaining:
            kept.append({**group, "hooks": remaining})
    return kept, changed


def read_json_object(path: Path) -> dict[str, Any]:
    """Load the settings object; a missing or blank file is an empty object."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    except (OSError, UnicodeDecodeError) as exc:
        raise HookFileError(f"cannot read {path}: {exc}; nothing was changed") from exc
    if not text.strip():
        return {}
    try:
        settings = json.loads(text)
    except json.JSONDecodeError as exc:
        raise HookFileError(
            f"{path} is not valid JSON ({exc.msg} at line {exc.lineno}, column {exc.colno}); "
            "fix or remove it and try again — nothing was changed"
        ) from exc
    if not isinstance(settings, dict):
        raise HookFileError(f"{path} must hold a JSON object; nothing was changed")
    return settings


def write_json_object(path: Path, settings: dict[str, Any]) -> None:
    """Write the settings atomically, keeping the file's permissions."""
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(settings, indent=2, ensure_ascii=False) + "\n"
    mode = path.stat().st_mode & 0o777 if path.exists() else 0o644
    # A crash mid-write must never leave the user's settings half written.
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as tmp:
            tmp.write(text)
        os.chmod(tmp_name, mode)
        os.replace(tmp_name, path)
    except BaseException:
        Path(tmp_name).unlink(missing_ok=True)
        raise
