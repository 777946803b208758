"""`tachograph hook install|uninstall cline <dir>`: one executable per event in
`<dir>/.cline/hooks/` (§6.5).

Cline 3.0.65 runs every file in its hooks directory named after an event (`PreToolUse`,
or `PreToolUse.sh`, `.py`, ...: the name is matched without case) and merges their
answers (a cancel from any wins; contexts are joined; the last file's `overrideInput`,
by path order, wins). So Tachograph's hook is a file of its own beside the user's: a
short shell script that execs the command-hook client, the URL and the client pinned
as for the other runtimes, marked as Tachograph's by its second line. A user's file
already named `<Event>` is never touched: Tachograph's is then written as
`<Event>.sh`; when both names are the user's, nothing is written and the error says
which. `uninstall` removes exactly the marked files.

Cline waits 120 s for a tool hook and then runs the call as if no hook had answered:
a call held longer than the client's wait (at most `MAX_CLIENT_WAIT_S`) is answered
by the client's failure path (nothing, or a deny when installed `--fail-closed`).
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import Final

from cli.cline_hook_files import MARKER, hooks_dir, own_hooks
from cli.hook_files import HookFileError
from cli.hook_waits import HELD_EVENTS, gate_waits
from cli.runtime_hooks import base_url, hook_command, ignore_beside
from ingest.runtimes.cline import FAIL_CLOSED_EVENTS, INSTALLED_EVENTS

RUNTIME: Final = "cline"
# Cline kills a tool hook after 120 s (toolCallTimeoutMs): the client gives up first.
RUNTIME_TIMEOUT_S: Final = 120
MAX_CLIENT_WAIT_S: Final = RUNTIME_TIMEOUT_S - 10
# The names Tachograph takes for an event's file, the first one not a user's.
_SUFFIXES: Final = ("", ".sh")


def script(command: str) -> str:
    """The hook file: `exec` the client, so Cline's kill reaches it."""
    python = shlex.quote(sys.executable)
    line = command.replace(f" {python} -S ", f" exec {python} -S ", 1)
    return f"#!/bin/sh\n{MARKER}\n{line}\n"


def install_cline_hooks(directory: Path, *, url: str, fail_closed: bool, hold_s: int = 0) -> Path:
    """Write one executable per Cline event, replacing Tachograph's earlier ones; the tool
    hooks' client waits out a hold of `hold_s` seconds, up to what Cline allows."""
    url = base_url(url)
    folder = hooks_dir(directory)
    ours = {path for _, path, _ in own_hooks(directory)}
    targets = {event: _free_name(folder, event, ours) for event in INSTALLED_EVENTS}
    waits = gate_waits(hold_s)
    for path in ours:
        path.unlink()
    folder.mkdir(parents=True, exist_ok=True)
    for event, path in targets.items():
        held = event in HELD_EVENTS[RUNTIME] and waits.client_s is not None
        wait = min(waits.client_s, MAX_CLIENT_WAIT_S) if held and waits.client_s else None
        gated = fail_closed and event in FAIL_CLOSED_EVENTS
        command = hook_command(RUNTIME, event, url=url, fail_closed=gated, client_wait_s=wait)
        path.write_text(script(command), encoding="utf-8")
        path.chmod(0o755)
        ignore_beside(path)
    return folder


def _free_name(folder: Path, event: str, ours: set[Path]) -> Path:
    """`<Event>`, else `<Event>.sh`, whichever is not a user's file (ours are replaced)."""
    taken = {
        path.name.lower(): path
        for path in (folder.iterdir() if folder.is_dir() else [])
        if path not in ours
    }
    for suffix in _SUFFIXES:
        name = event + suffix
        if name.lower() not in taken:
            return folder / name
    names = ", ".join(str(folder / (event + s)) for s in _SUFFIXES)
    raise HookFileError(
        f"{names} are hooks Tachograph did not install; rename one of them (Cline runs "
        f"every {event}.<ext> file, e.g. {event}.py or {event}.bash) and try again — "
        "nothing was changed"
    )


def uninstall_cline_hooks(directory: Path) -> Path:
    """Delete exactly Tachograph's hook files (and their lines in a .gitignore beside)."""
    folder = hooks_dir(directory)
    removed = [path for _, path, _ in own_hooks(directory)]
    for path in removed:
        path.unlink()
    _unignore(folder, {path.name for path in removed})
    return folder


def _unignore(folder: Path, names: set[str]) -> None:
    ignore = folder / ".gitignore"
    if not names or not ignore.is_file():
        return
    lines = [line for line in ignore.read_text(encoding="utf-8").splitlines() if line not in names]
    if [line for line in lines if line.strip()] in ([], [".gitignore"]):
        ignore.unlink()
    else:
        ignore.write_text("\n".join(lines) + "\n", encoding="utf-8")


def install_note(hold_s: int) -> str | None:
    """A warning when a call may be held longer than Cline waits for its hook."""
    waits = gate_waits(hold_s)
    if waits.client_s is None or waits.client_s <= MAX_CLIENT_WAIT_S:
        return None
    return (
        f"warning: a call may be held {hold_s} s, but Cline waits {RUNTIME_TIMEOUT_S} s for a "
        f"hook: a hold still undecided after {MAX_CLIENT_WAIT_S} s is answered as if "
        "Tachograph could not be reached (the call runs, or is denied with --fail-closed)"
    )
