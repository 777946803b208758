"""`tachograph hook install|uninstall copilot <dir>`: Tachograph's own Copilot CLI hook file.

Copilot CLI 1.0 reads every `$COPILOT_HOME/hooks/*.json` (`<dir>/.copilot/hooks/` for a home
`<dir>`), so Tachograph writes a file of its own, `tachograph.json`, and never touches the
user's files: their hooks are preserved by construction, a re-install rewrites only ours,
and `uninstall` deletes only ours. The file registers Copilot's camelCase events (its own
payload) as

- command hooks, `TACHOGRAPH_URL=<url> /abs/tachograph hook copilot <event>` (the URL and
  the executable pinned), with `--fail-closed` on the gate events when asked; or
- with `--http`, native HTTP hooks to `<url>/hooks/copilot/<event>`, which send the agent
  token, session and workspace from the agent's environment as headers (Copilot
  interpolates `$NAME` for the names in `allowedEnvVars`; never the admin key). With
  `--fail-closed` the gate events stay command hooks with `--fail-closed`: an HTTP hook
  cannot fail closed when Tachograph is down.

Copilot refuses an `http://` hook with `allowedEnvVars`, and an `http://` preToolUse or
permissionRequest hook, unless `COPILOT_HOOK_ALLOW_LOCALHOST=1` is set for a loopback URL;
`install_note` says so.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Final
from urllib.parse import urlsplit

from cli.hook_files import HookFileError, read_json_object, write_json_object
from cli.hook_waits import HELD_EVENTS, gate_waits
from cli.runtime_hooks import GITIGNORE, base_url, hook_command, ignore_beside, own_command
from ingest.runtimes.copilot_cli import REGISTERED_EVENTS, REGISTERED_GATE_EVENTS

RUNTIME: Final = "copilot"
HOOK_FILE: Final = Path(".copilot") / "hooks" / "tachograph.json"
HOOK_PATH: Final = "/hooks/copilot"
TIMEOUT_SEC: Final = 30
# The agent's own narrow token, and the session and workspace it works in (§6.5).
HTTP_HEADERS: Final = {
    "x-tachograph-key": "$TACHOGRAPH_AGENT_TOKEN",
    "x-tachograph-session-id": "$TACHOGRAPH_SESSION_ID",
    "x-tachograph-workspace": "$TACHOGRAPH_WORKSPACE",
}
HTTP_ENV_VARS: Final = ("TACHOGRAPH_AGENT_TOKEN", "TACHOGRAPH_SESSION_ID", "TACHOGRAPH_WORKSPACE")
_LOOPBACK: Final = re.compile(r"^(?:localhost|127(?:\.\d{1,3}){3}|\[?::1\]?)$")


def hook_file(directory: Path) -> Path:
    """Tachograph's Copilot hook file in a home directory."""
    return directory / HOOK_FILE


def is_own(entry: object) -> bool:
    """Whether a hook entry is one Tachograph installed (by its command or URL)."""
    if not isinstance(entry, dict):
        return False
    command, url = entry.get("bash"), entry.get("url")
    if isinstance(command, str) and own_command(RUNTIME).match(command):
        return True
    return isinstance(url, str) and HOOK_PATH + "/" in url


def install_copilot_hooks(
    directory: Path, *, http: bool, url: str, fail_closed: bool, hold_s: int = 0
) -> Path:
    """Write `<dir>/.copilot/hooks/tachograph.json`, replacing an earlier one of ours; the
    hooks on events a call can be held on wait longer than a hold of `hold_s` seconds."""
    url = base_url(url)
    path = hook_file(directory)
    _own_file_or_fail(path)
    hooks: dict[str, list[dict[str, Any]]] = {}
    for event in REGISTERED_EVENTS:
        gated = fail_closed and event in REGISTERED_GATE_EVENTS
        entry = _entry(event, http=http and not gated, url=url, fail_closed=gated)
        waits = gate_waits(hold_s)
        if event in HELD_EVENTS[RUNTIME] and waits.client_s is not None:
            entry["timeoutSec"] = max(TIMEOUT_SEC, waits.runtime_s)
            if entry["type"] == "command":
                entry["bash"] = hook_command(
                    RUNTIME, event, url=url, fail_closed=gated, client_wait_s=waits.client_s
                )
        hooks[event] = [entry]
    write_json_object(path, {"version": 1, "hooks": hooks})
    ignore_beside(path)
    return path


def uninstall_copilot_hooks(directory: Path) -> Path:
    """Delete Tachograph's hook file (only its own entries, should someone have added any)."""
    path = hook_file(directory)
    if not path.exists():
        return path
    settings = read_json_object(path)
    hooks = settings.get("hooks")
    kept: dict[str, Any] = {}
    if isinstance(hooks, dict):
        for event, entries in hooks.items():
            if not isinstance(entries, list):
                kept[event] = entries
                continue
            remaining = [e for e in entries if not is_own(e)]
            if remaining:
                kept[event] = remaining
    if kept:
        write_json_object(path, {**settings, "hooks": kept})
        return path
    path.unlink()
    _unignore(path)
    return path


def install_note(*, http: bool, url: str) -> str | None:
    """What the user must know for Copilot to run the installed HTTP hooks, if anything."""
    if not http:
        return None
    parts = urlsplit(url)
    if parts.scheme == "https":
        return None
    if _LOOPBACK.match(parts.hostname or ""):
        return (
            "note: Copilot CLI runs http:// hooks to a loopback URL only with "
            "COPILOT_HOOK_ALLOW_LOCALHOST=1 in its environment; set it where copilot runs"
        )
    return (
        f"warning: Copilot CLI refuses http:// hooks that send headers, and preToolUse/"
        f"permissionRequest hooks over http://, to {parts.hostname}: use an https:// URL"
    )


def _entry(event: str, *, http: bool, url: str, fail_closed: bool) -> dict[str, Any]:
    if not http:
        command = hook_command(RUNTIME, event, url=url, fail_closed=fail_closed)
        return {"type": "command", "bash": command, "timeoutSec": TIMEOUT_SEC}
    return {
        "type": "http",
        "url": f"{url}{HOOK_PATH}/{event}",
        "headers": dict(HTTP_HEADERS),
        "allowedEnvVars": list(HTTP_ENV_VARS),
        "timeoutSec": TIMEOUT_SEC,
    }


def _own_file_or_fail(path: Path) -> None:
    """Refuse to overwrite a `tachograph.json` holding hooks Tachograph did not write."""
    if not path.exists():
        return
    hooks = read_json_object(path).get("hooks", {})
    entries = (
        [e for v in hooks.values() for e in (v if isinstance(v, list) else [v])]
        if isinstance(hooks, dict)
        else [hooks]
    )
    if not all(map(is_own, entries)):
        raise HookFileError(
            f"{path} holds hooks Tachograph did not install; move them to another file in "
            f"{path.parent} and try again — nothing was changed"
        )


def _unignore(path: Path) -> None:
    """Drop the file's line from the .gitignore beside it; the .gitignore too if only ours."""
    ignore = path.parent / GITIGNORE
    if not ignore.exists():
        return
    lines = [line for line in ignore.read_text(encoding="utf-8").splitlines() if line != path.name]
    if [line for line in lines if line.strip()] in ([], [GITIGNORE]):
        ignore.unlink()
    else:
        ignore.write_text("\n".join(lines) + "\n", encoding="utf-8")
