"""Install and uninstall Tachograph's hooks in a project's Claude Code local settings (§6.5)."""

from __future__ import annotations

import json
import os
import re
import shlex
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

from api.adapters.claude_code import NORMALISED_EVENTS

SETTINGS_RELATIVE_PATH: Final = Path(".claude") / "settings.local.json"
COMMAND_PREFIX: Final = "tachograph hook claude"
HOOK_PATH: Final = "/hooks/claude"
# Agents hold a narrow agent token; the bootstrap admin key stays with the operator.
AGENT_TOKEN_ENV: Final = "TACHOGRAPH_AGENT_TOKEN"
ADMIN_KEY_ENV: Final = "TACHOGRAPH_API_KEY"
HTTP_ENV_VARS: Final = (AGENT_TOKEN_ENV, "TACHOGRAPH_SESSION_ID", "TACHOGRAPH_WORKSPACE")

# Claude Code runs only `command` (and `mcp_tool`) hooks on SessionStart and silently drops
# an `http` one (hooks reference, SessionStart), so http mode still uses the command there.
COMMAND_ONLY_EVENTS: Final = frozenset({"SessionStart"})

# Own command entries, optionally after `NAME=value` assignments (http mode pins the URL).
_OWN_COMMAND: Final = re.compile(
    r"^\s*(?:[A-Za-z_][A-Za-z0-9_]*=\S*\s+)*" + re.escape(COMMAND_PREFIX) + r"(?:\s|$)"
)
# `$NAME` or `${NAME}`, the two forms Claude Code interpolates in http hook headers.
_ADMIN_KEY_REFERENCE: Final = re.compile(
    r"\$(?:" + ADMIN_KEY_ENV + r"(?![A-Za-z0-9_])|\{" + ADMIN_KEY_ENV + r"\})"
)


class ClaudeSettingsError(ValueError):
    """The settings file cannot be merged safely; it was left untouched."""


def settings_path(project_dir: Path) -> Path:
    """Return the Claude Code local settings file of a project directory."""
    return project_dir / SETTINGS_RELATIVE_PATH


def install_claude_hooks(project_dir: Path, *, http: bool, url: str) -> Path:
    """Add one Tachograph hook per normalised event, replacing earlier Tachograph entries."""
    base_url = _base_url(url)
    path = settings_path(project_dir)
    settings = _read_settings(path)
    hooks = _existing_hooks(settings, path)
    if hooks is None:
        hooks = settings["hooks"] = {}
    _remove_own_entries(hooks)
    for event in NORMALISED_EVENTS:
        groups = hooks.setdefault(event, [])
        if not isinstance(groups, list):
            raise ClaudeSettingsError(f"{path}: hooks.{event} must be a list; nothing was changed")
        groups.append({"matcher": "*", "hooks": [_own_entry(event, http=http, base_url=base_url)]})
    _write_settings(path, settings)
    return path


def uninstall_claude_hooks(project_dir: Path) -> Path:
    """Remove exactly Tachograph's hook entries, and the groups and lists they leave empty."""
    path = settings_path(project_dir)
    if not path.exists():
        return path
    settings = _read_settings(path)
    hooks = _existing_hooks(settings, path)
    if hooks is not None and _remove_own_entries(hooks):
        if not hooks:
            del settings["hooks"]
        _write_settings(path, settings)
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


def _own_entry(event: str, *, http: bool, base_url: str) -> dict[str, Any]:
    """Build Tachograph's hook handler for one event."""
    command = f"{COMMAND_PREFIX} {event}"
    if not http:
        return {"type": "command", "command": command}
    if event in COMMAND_ONLY_EVENTS:
        # The command client reads TACHOGRAPH_URL; pin it so it reaches the same server.
        return {"type": "command", "command": f"TACHOGRAPH_URL={shlex.quote(base_url)} {command}"}
    return {
        "type": "http",
        "url": base_url + HOOK_PATH,
        "headers": {
            "x-tachograph-key": "$TACHOGRAPH_AGENT_TOKEN",
            "x-tachograph-session-id": "$TACHOGRAPH_SESSION_ID",
            "x-tachograph-workspace": "$TACHOGRAPH_WORKSPACE",
        },
        # Claude Code interpolates only listed variables; unset ones become empty strings.
        "allowedEnvVars": list(HTTP_ENV_VARS),
    }


def _base_url(url: str) -> str:
    """Validate the server URL and return it without a trailing slash."""
    if not re.match(r"^https?://[^/\s]+", url) or any(c.isspace() for c in url):
        raise ClaudeSettingsError(f"hook URL must be an http:// or https:// URL, got {url!r}")
    return url.rstrip("/")


def _remove_own_entries(hooks: dict[str, Any]) -> bool:
    """Drop own handlers, then the groups and event lists that this alone emptied."""
    changed = False
    for event in list(hooks):
        groups = hooks[event]
        if not isinstance(groups, list):
            continue
        kept, event_changed = _without_own_entries(groups)
        if not event_changed:
            continue
        changed = True
        if kept:
            hooks[event] = kept
        else:
            del hooks[event]
    return changed


def _without_own_entries(groups: list[Any]) -> tuple[list[Any], bool]:
    """Return the matcher groups without own handlers, dropping groups left empty."""
    kept: list[Any] = []
    changed = False
    for group in groups:
        handlers = group.get("hooks") if isinstance(group, dict) else None
        if not isinstance(handlers, list) or not any(map(is_own_entry, handlers)):
            kept.append(group)
            continue
        changed = True
        remaining = [h for h in handlers if not is_own_entry(h)]
        if remaining:
            kept.append({**group, "hooks": remaining})
    return kept, changed


def _existing_hooks(settings: dict[str, Any], path: Path) -> dict[str, Any] | None:
    """Return the settings' `hooks` object, or None when there is none."""
    hooks = settings.get("hooks")
    if hooks is None or isinstance(hooks, dict):
        return hooks
    raise ClaudeSettingsError(f"{path}: `hooks` must be a JSON object; nothing was changed")


def _read_settings(path: Path) -> dict[str, Any]:
    """Load the settings object; a missing or blank file is an empty object."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    except (OSError, UnicodeDecodeError) as exc:
        raise ClaudeSettingsError(f"cannot read {path}: {exc}; nothing was changed") from exc
    if not text.strip():
        return {}
    try:
        settings = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ClaudeSettingsError(
            f"{path} is not valid JSON ({exc.msg} at line {exc.lineno}, column {exc.colno}); "
            "fix or remove it and try again — nothing was changed"
        ) from exc
    if not isinstance(settings, dict):
        raise ClaudeSettingsError(f"{path} must hold a JSON object; nothing was changed")
    return settings


def _write_settings(path: Path, settings: dict[str, Any]) -> None:
    """Write the settings atomically, keeping the file's permissions."""
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(settings, indent=2, ensure_ascii=False) + "\n"
    mode = path.stat().st_mode & 0o777 if path.exists() else 0o644
    # A crash mid-write must never leave the user's settings half written.
    fd, tmp_name = tempfile.mkstemp(prefix=".settings.local.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as tmp:
            tmp.write(text)
        os.chmod(tmp_name, mode)
        os.replace(tmp_name, path)
    except BaseException:
        Path(tmp_name).unlink(missing_ok=True)
        raise
