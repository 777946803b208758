"""Install and uninstall Tachograph's hooks in a project's Claude Code local settings (§6.5).

Command entries run the hook client as a file under this installation's Python with `-S`,
with the server URL pinned (cli/runtime_hooks.py `hook_command`), so they reach the same
server whatever environment Claude Code gives its hooks. With `--http`, native HTTP hooks
post to `<url>/hooks/claude`; SessionStart stays a command (Claude Code runs no HTTP hook
there). With `--fail-closed`, the gate events are command hooks that deny when Tachograph
cannot be reached, whatever the mode of the rest: an HTTP hook always fails open.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

from cli.hook_files import HookFileError, read_json_object, remove_own_entries, write_json_object
from cli.hook_waits import HELD_EVENTS, gate_waits
from cli.runtime_hooks import base_url, hook_command, ignore_beside, own_command
from ingest.runtimes.claude_code import FAIL_CLOSED_EVENTS, INSTALLED_EVENTS

SETTINGS_RELATIVE_PATH: Final = Path(".claude") / "settings.local.json"
RUNTIME: Final = "claude"
HOOK_PATH: Final = "/hooks/claude"
# Agents hold a narrow agent token; the bootstrap admin key stays with the operator.
AGENT_TOKEN_ENV: Final = "TACHOGRAPH_AGENT_TOKEN"
ADMIN_KEY_ENV: Final = "TACHOGRAPH_API_KEY"
HTTP_ENV_VARS: Final = (AGENT_TOKEN_ENV, "TACHOGRAPH_SESSION_ID", "TACHOGRAPH_WORKSPACE")

# Claude Code runs only `command` (and `mcp_tool`) hooks on SessionStart and silently drops
# an `http` one (hooks reference, SessionStart), so http mode still uses the command there.
COMMAND_ONLY_EVENTS: Final = frozenset({"SessionStart"})

# Own command entries: the pinned `-S` client form, and `tachograph hook claude` as
# earlier releases wrote it (so a re-install replaces those too).
_OWN_COMMAND: Final = own_command(RUNTIME)
# `$NAME` or `${NAME}`, the two forms Claude Code interpolates in http hook headers.
_ADMIN_KEY_REFERENCE: Final = re.compile(
    r"\$(?:" + ADMIN_KEY_ENV + r"(?![A-Za-z0-9_])|\{" + ADMIN_KEY_ENV + r"\})"
)


# The one error of every hook file (cli/hook_files.py), under the name callers know.
ClaudeSettingsError = HookFileError


def settings_path(project_dir: Path) -> Path:
    """Return the Claude Code local settings file of a project directory."""
    return project_dir / SETTINGS_RELATIVE_PATH


def install_claude_hooks(
    project_dir: Path, *, http: bool, url: str, fail_closed: bool = False, hold_s: int = 0
) -> Path:
    """Add one Tachograph hook per installed event, replacing earlier Tachograph entries;
    those on events a call can be held on wait longer than a hold of `hold_s` seconds."""
    url = base_url(url)
    path = settings_path(project_dir)
    settings = read_json_object(path)
    hooks = _existing_hooks(settings, path)
    if hooks is None:
        hooks = settings["hooks"] = {}
    _remove_own_entries(hooks)
    for event in INSTALLED_EVENTS:
        groups = hooks.setdefault(event, [])
        if not isinstance(groups, list):
            raise ClaudeSettingsError(f"{path}: hooks.{event} must be a list; nothing was changed")
        gated = fail_closed and event in FAIL_CLOSED_EVENTS
        entry = _own_entry(event, http=http and not gated, url=url, fail_closed=gated)
        waits = gate_waits(hold_s)
        if event in HELD_EVENTS[RUNTIME] and waits.client_s is not None:
            entry["timeout"] = waits.runtime_s
            if entry["type"] == "command":
                entry["command"] = hook_command(
                    RUNTIME, event, url=url, fail_closed=gated, client_wait_s=waits.client_s
                )
        groups.append({"matcher": "*", "hooks": [entry]})
    write_json_object(path, settings)
    ignore_beside(path)
    return path


def uninstall_claude_hooks(project_dir: Path) -> Path:
    """Remove exactly Tachograph's hook entries, and the groups and lists they leave empty."""
    path = settings_path(project_dir)
    if not path.exists():
        return path
    settings = read_json_object(path)
    hooks = _existing_hooks(settings, path)
    if hooks is not None and _remove_own_entries(hooks):
        if not hooks:
            del settings["hooks"]
        write_json_object(path, settings)
    return path


def is_own_entry(entry: object) -> bool:
    """Tell whether a hook handler is one Tachograph installed (by command prefix or URL)."""
    if not isinstance(entry, dict):
        return False
    command, url = entry.get("command"), entry.get("url")
    if isinstance(command, str) and _OWN_COMMAND.match(command):
        return True
    return isinstance(url, str) and url.rstrip("/").endswith(HOOK_PATH)


def count_admin_key_hooks(settings: object) -> int:
    """Count Tachograph's own handlers that would send the admin key (earlier releases did)."""
    own = filter(is_own_entry, _handlers(settings))
    return sum(1 for entry in own if _sends_admin_key(entry))


def _handlers(settings: object) -> Iterator[dict[str, Any]]:
    """Yield every hook handler of a settings object, skipping shapes Claude Code ignores."""
    hooks = settings.get("hooks") if isinstance(settings, dict) else None
    if not isinstance(hooks, dict):
        return
    for groups in hooks.values():
        for group in groups if isinstance(groups, list) else []:
            handlers = group.get("hooks") if isinstance(group, dict) else None
            for handler in handlers if isinstance(handlers, list) else []:
                if isinstance(handler, dict):
                    yield handler


def _sends_admin_key(entry: dict[str, Any]) -> bool:
    """Tell whether a handler interpolates the admin key into a header or may read it."""
    headers, allowed = entry.get("headers"), entry.get("allowedEnvVars")
    if isinstance(allowed, list) and ADMIN_KEY_ENV in allowed:
        return True
    return isinstance(headers, dict) and any(
        isinstance(value, str) and _ADMIN_KEY_REFERENCE.search(value) for value in headers.values()
    )


def _own_entry(event: str, *, http: bool, url: str, fail_closed: bool) -> dict[str, Any]:
    """Build Tachograph's hook handler for one event."""
    if not http or event in COMMAND_ONLY_EVENTS:
        command = hook_command(RUNTIME, event, url=url, fail_closed=fail_closed)
        return {"type": "command", "command": command}
    return {
        "type": "http",
        "url": url + HOOK_PATH,
        "headers": {
            "x-tachograph-key": "$TACHOGRAPH_AGENT_TOKEN",
            "x-tachograph-session-id": "$TACHOGRAPH_SESSION_ID",
            "x-tachograph-workspace": "$TACHOGRAPH_WORKSPACE",
        },
        # Claude Code interpolates only listed variables; unset ones become empty strings.
        "allowedEnvVars": list(HTTP_ENV_VARS),
    }


def _remove_own_entries(hooks: dict[str, Any]) -> bool:
    return remove_own_entries(hooks, is_own_entry)


def _existing_hooks(settings: dict[str, Any], path: Path) -> dict[str, Any] | None:
    """Return the settings' `hooks` object, or None when there is none."""
    hooks = settings.get("hooks")
    if hooks is None or isinstance(hooks, dict):
        return hooks
    raise ClaudeSettingsError(f"{path}: `hooks` must be a JSON object; nothing was changed")
