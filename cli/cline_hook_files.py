"""Cline's hook files as Tachograph reads them back: which event a file in a hooks
directory runs for (as Cline 3.0.65 matches its name), and which files are Tachograph's
(its mark on the second line) with the command each runs. `hook uninstall`, `doctor` and
the hold check (cli/hook_waits.py) read them here; cli/cline_hooks.py writes them.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Final

from ingest.runtimes.cline import INSTALLED_EVENTS

HOOKS_DIR: Final = Path(".cline") / "hooks"
MARKER: Final = "# tachograph-hook: cline (`tachograph hook uninstall cline` removes it)"
# The extensions Cline accepts on an event's file (none, or one of these).
EXTENSIONS: Final = frozenset(
    {"", ".sh", ".bash", ".zsh", ".js", ".mjs", ".cjs", ".ts", ".mts", ".cts", ".py", ".ps1"}
)
_EVENTS_BY_NAME: Final = {event.lower(): event for event in INSTALLED_EVENTS}
# The command line: `[NAME=value ...] exec <python> -S <client> cline <Event> [...]`.
_COMMAND: Final = re.compile(r"^((?:[A-Za-z_][A-Za-z0-9_]*=\S*\s+)*)exec\s+(.*\scline\s.*)$")


def hooks_dir(directory: Path) -> Path:
    return directory / HOOKS_DIR


def event_of(path: Path) -> str | None:
    """The Cline event a hook file is run for (as Cline matches its name), or None."""
    stem, extension = os.path.splitext(path.name)
    if path.name.startswith(".") or extension.lower() not in EXTENSIONS:
        return None
    return _EVENTS_BY_NAME.get(stem.strip().lower())


def command_of(text: str) -> str | None:
    """The hook command a Tachograph hook file runs (without its `exec`), else None."""
    lines = text.splitlines()
    if len(lines) < 3 or lines[1] != MARKER:
        return None
    match = _COMMAND.match(lines[2])
    return match.group(1) + match.group(2) if match else None


def own_hooks(directory: Path) -> Iterator[tuple[str, Path, str]]:
    """(event, file, command) of each Tachograph hook file in `<dir>/.cline/hooks/`."""
    folder = hooks_dir(directory)
    if not folder.is_dir():
        return
    for path in sorted(folder.iterdir()):
        event = event_of(path)
        if event is None or not path.is_file():
            continue
        command = _own_command_of(path)
        if command is not None:
            yield event, path, command


def _own_command_of(path: Path) -> str | None:
    try:
        with path.open(encoding="utf-8") as file:
            return command_of(file.read(4096))
    except (OSError, UnicodeDecodeError):
        return None
