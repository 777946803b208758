"""How long installed hooks wait, against how long the server may hold a call.

A call held for an operator (an approval rule's `timeoutS`, a handler's `ask`) is
answered only when someone decides. A runtime that stops waiting first runs the call
undecided (Claude Code goes on after a hook times out), so every hook on an event that
can be held must wait longer than the longest hold: the runtime's own timeout of the
hook, and for a command hook also the hook client's (`TACHOGRAPH_HOOK_TIMEOUT_S`, 10 s
unless set), which must give up first so the runtime hears a clean failure rather than
killing it.

`hook install` asks the server it installs against for the hold (`longestHoldS` of
`GET /api/health`) and writes waits from it (`gate_waits`); `serve` and `doctor` read
the installed files back (`installed_waits`) and name each hook that waits less.
"""

from __future__ import annotations

import contextlib
import json
import re
import urllib.error
import urllib.request
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from domain.approval_rules import MAX_TIMEOUT_S

# The runtime's timeout of a held event's hook: the hold and this much more.
RUNTIME_MARGIN_S: Final = 20
# The hook client's own wait: the hold and this much more (less than the runtime's, so
# the client gives up, and says so in its failure log, before the runtime kills it).
CLIENT_MARGIN_S: Final = 15
# The client's wait when nothing sets TACHOGRAPH_HOOK_TIMEOUT_S (hook_client/command.py).
CLIENT_DEFAULT_S: Final = 10.0
# Assumed when the server cannot be asked at install time: the longest a rule may hold.
UNKNOWN_HOLD_S: Final = MAX_TIMEOUT_S
HEALTH_TIMEOUT_S: Final = 5.0

# Each runtime's events a call can be held on, as its hook file names them.
HELD_EVENTS: Final[Mapping[str, frozenset[str]]] = {
    "claude": frozenset({"PreToolUse", "PermissionRequest"}),
    "codex": frozenset({"PreToolUse", "PermissionRequest"}),
    "gemini": frozenset({"BeforeTool"}),
    "qwen": frozenset({"PreToolUse", "PermissionRequest"}),
    "droid": frozenset({"PreToolUse"}),
    "copilot": frozenset({"preToolUse", "PreToolUse", "permissionRequest", "PermissionRequest"}),
}
# The runtimes whose hook timeouts count milliseconds (Qwen Code is a Gemini CLI fork).
MILLISECOND_RUNTIMES: Final = frozenset({"gemini", "qwen"})
# The runtime's timeout when an entry sets none, in seconds (command, http). Claude
# Code's command default is documented (600 s); the rest are taken low, so a hook whose
# wait is not written down is reported rather than trusted.
_RUNTIME_DEFAULT_S: Final[Mapping[str, tuple[float, float]]] = {
    "claude": (600.0, 30.0),
    "codex": (60.0, 60.0),
    "gemini": (60.0, 60.0),
    "qwen": (60.0, 60.0),
    "droid": (60.0, 60.0),
    "copilot": (30.0, 30.0),
}
# Tachograph's plugin of OpenCode and Kilo (cli/opencode_plugin.py), under a home directory,
# and the plugin hooks a call can be held on: the plugin pins how long it waits for them.
PLUGIN_FILES: Final[Mapping[str, Path]] = {
    runtime: Path(".config") / runtime / "plugin" / "tachograph.js"
    for runtime in ("opencode", "kilo")
}
HELD_PLUGIN_HOOKS: Final = ("tool.execute.before",)
_PLUGIN_SETTINGS: Final = re.compile(r"^const SETTINGS = (\{.*\});$", re.MULTILINE)
_CLIENT_WAIT: Final = re.compile(r"(?:^|\s)TACHOGRAPH_HOOK_TIMEOUT_S=(['\"]?)([0-9.]+)\1(?:\s|$)")


@dataclass(frozen=True)
class GateWaits:
    """What `hook install` writes on the events a call can be held on."""

    runtime_s: int  # the runtime's timeout of the hook
    client_s: int | None  # TACHOGRAPH_HOOK_TIMEOUT_S pinned in a command hook (None: unset)


def gate_waits(hold_s: int) -> GateWaits:
    """Waits that outlast a hold of `hold_s` seconds (nothing pinned when nothing holds)."""
    if hold_s <= 0:
        return GateWaits(0, None)
    return GateWaits(hold_s + RUNTIME_MARGIN_S, hold_s + CLIENT_MARGIN_S)


def server_hold_s(url: str, env: Mapping[str, str]) -> int | None:
    """`longestHoldS` of the server at `url`, None when it cannot be read (down, refused,
    an older server). Sends TACHOGRAPH_API_KEY, else TACHOGRAPH_AGENT_TOKEN, as the key."""
    key = env.get("TACHOGRAPH_API_KEY") or env.get("TACHOGRAPH_AGENT_TOKEN")
    headers = {"x-tachograph-key": key} if key else {}
    request = urllib.request.Request(url.rstrip("/") + "/api/health", headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=HEALTH_TIMEOUT_S) as response:  # noqa: S310
            body = json.loads(response.read())
    except urllib.error.HTTPError as exc:
        if exc.code != 503:  # unavailable answers with the same body
            return None
        try:
            body = json.loads(exc.read())
        except ValueError:
            return None
    except (OSError, ValueError):
        return None
    hold = body.get("longestHoldS") if isinstance(body, dict) else None
    return hold if type(hold) is int and hold >= 0 else None


@dataclass(frozen=True)
class HookWait:
    """One installed hook on a held event, and how long it waits, in seconds."""

    path: Path
    runtime: str
    event: str
    kind: str  # command | http | plugin
    waits_s: float

    def describe(self) -> str:
        return (
            f"{self.path}: {self.runtime} {self.event} ({self.kind} hook) waits {self.waits_s:g} s"
        )


def installed_waits(directory: Path) -> list[HookWait]:
    """Tachograph's hooks on held events in the runtime hook files under a home or project
    directory, each with how long it waits (unreadable files are doctor's to report)."""
    found: list[HookWait] = []
    for runtime, path, hooks in _hook_files(directory):
        for event, entry in _entries(hooks):
            if event in HELD_EVENTS[runtime] and _is_tachograph(entry):
                found.append(_wait_of(path, runtime, event, entry))
    return found + _plugin_waits(directory)


def is_own_plugin(path: Path) -> bool:
    """Whether the file at `path` is a plugin Tachograph wrote."""
    try:
        head = path.read_text(encoding="utf-8")[:200]
    except (OSError, UnicodeDecodeError):
        return False
    return head.startswith("// Tachograph's plugin for ")


def installed_plugin_settings(path: Path) -> dict[str, Any] | None:
    """The settings a plugin was written with (None: not one of Tachograph's)."""
    if not path.is_file() or not is_own_plugin(path):
        return None
    found = _PLUGIN_SETTINGS.search(path.read_text(encoding="utf-8"))
    try:
        settings = json.loads(found.group(1)) if found else None
    except ValueError:
        return None
    return settings if isinstance(settings, dict) else None


def _plugin_waits(directory: Path) -> list[HookWait]:
    found: list[HookWait] = []
    for runtime, relative in PLUGIN_FILES.items():
        settings = installed_plugin_settings(directory / relative)
        wait = settings.get("heldWaitS") if settings else None
        if isinstance(wait, int | float) and not isinstance(wait, bool):
            found += [
                HookWait(directory / relative, runtime, hook, "plugin", float(wait))
                for hook in HELD_PLUGIN_HOOKS
            ]
    return found


def too_short(waits: Iterable[HookWait], hold_s: int) -> list[HookWait]:
    """The hooks that stop waiting before a hold of `hold_s` seconds can end."""
    return [wait for wait in waits if hold_s > 0 and wait.waits_s <= hold_s]


def _hook_files(directory: Path) -> Iterator[tuple[str, Path, Any]]:
    candidates = [
        ("claude", directory / ".claude" / "settings.local.json"),
        ("claude", directory / ".claude" / "settings.json"),
        ("codex", directory / ".codex" / "hooks.json"),
        ("gemini", directory / ".gemini" / "settings.json"),
        ("qwen", directory / ".qwen" / "settings.json"),
        ("droid", directory / ".factory" / "settings.json"),
    ]
    copilot = directory / ".copilot" / "hooks"
    if copilot.is_dir():
        candidates += [("copilot", path) for path in sorted(copilot.glob("*.json"))]
    for runtime, path in candidates:
        try:
            settings = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(settings, dict) and isinstance(settings.get("hooks"), dict):
            yield runtime, path, settings["hooks"]


def _entries(hooks: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """(event, handler) of both shapes: matcher groups holding `hooks` (Claude Code,
    Codex, Gemini CLI), and handlers listed straight under the event (Copilot CLI)."""
    for event, items in hooks.items():
        for item in items if isinstance(items, list) else []:
            if not isinstance(item, dict):
                continue
            nested = item.get("hooks")
            handlers = nested if isinstance(nested, list) else [item]
            for handler in handlers:
                if isinstance(handler, dict):
                    yield event, handler


def _is_tachograph(entry: dict[str, Any]) -> bool:
    command = entry.get("command") or entry.get("bash")
    url = entry.get("url")
    if isinstance(command, str):
        return "hook_client/command.py" in command or bool(
            re.search(r"(?:^|[\s/])tachograph'?\s+hook\s", command)
        )
    return isinstance(url, str) and "/hooks/" in url


def _wait_of(path: Path, runtime: str, event: str, entry: dict[str, Any]) -> HookWait:
    command = entry.get("command") or entry.get("bash")
    kind = "command" if isinstance(command, str) else "http"
    runtime_s = _runtime_timeout_s(runtime, kind, entry)
    waits = runtime_s
    if isinstance(command, str):
        pinned = _CLIENT_WAIT.search(command)
        client_s = float(pinned.group(2)) if pinned else CLIENT_DEFAULT_S
        waits = min(runtime_s, client_s)
    return HookWait(path, runtime, event, kind, waits)


def _runtime_timeout_s(runtime: str, kind: str, entry: dict[str, Any]) -> float:
    command_default, http_default = _RUNTIME_DEFAULT_S[runtime]
    default = command_default if kind == "command" else http_default
    key = "timeoutSec" if runtime == "copilot" else "timeout"
    value = entry.get(key)
    if not isinstance(value, int | float) or isinstance(value, bool) or value <= 0:
        return default
    return float(value) / 1000 if runtime in MILLISECOND_RUNTIMES else float(value)


def search_directories(workspace_root: Path, env: Mapping[str, str]) -> list[Path]:
    """Where `serve` and `doctor` look for installed hooks: the home directory, the
    workspace root and the directories right below it (registered workspaces)."""
    found = [Path(env["HOME"])] if env.get("HOME") else []
    found.append(workspace_root)
    with contextlib.suppress(OSError):
        found += sorted(child for child in workspace_root.iterdir() if child.is_dir())
    return list(dict.fromkeys(path.resolve() for path in found))


def short_hook_findings(hold_s: int, directories: Iterable[Path]) -> list[str]:
    """One line per installed hook that stops waiting before a hold can end."""
    waits = [wait for directory in directories for wait in installed_waits(directory)]
    return [
        f"{wait.describe()}, but a call may be held {hold_s} s; "
        "reinstall with `tachograph hook install` against this server"
        for wait in too_short(waits, hold_s)
    ]
