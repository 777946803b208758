"""`tachograph hook install|uninstall <runtime> <dir>` for the command-hook runtimes (§6.5).

Each runtime reads its hooks from its own file (tests/fixtures/SOURCES.md): Codex from
`$CODEX_HOME/hooks.json` (`<dir>/.codex/hooks.json` for a home `<dir>`), Gemini CLI from
`.gemini/settings.json` of a home or a project, Qwen Code from `.qwen/settings.json`,
Factory Droid from `.factory/settings.json`.
Tachograph's entries are merged beside the user's, one per event, replacing its own from
an earlier install; `uninstall` removes exactly those. Each entry pins the server URL and
the `tachograph` executable by absolute path, so it reaches the same server whatever
environment the runtime gives its hooks (Gemini CLI passes a sanitised one).

A file written inside a git work tree gets a `.gitignore` beside it that ignores the file
and itself: an untracked hook file would otherwise keep a worktree from being removed.
"""

from __future__ import annotations

import re
import shlex
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Final

import hook_client.command
import ingest.runtimes.codex as codex
import ingest.runtimes.factory_droid as factory_droid
import ingest.runtimes.gemini_cli as gemini_cli
import ingest.runtimes.qwen_code as qwen_code
from cli.hook_files import HookFileError, read_json_object, remove_own_entries, write_json_object
from cli.hook_waits import HELD_EVENTS, MILLISECOND_RUNTIMES, gate_waits
from domain.lifecycle_events import PERMISSION_REQUEST

DEFAULT_URL: Final = "http://127.0.0.1:8000"
GITIGNORE: Final = ".gitignore"


@dataclass(frozen=True)
class NestedHookFile:
    """A runtime whose hook file nests like Claude Code's: hooks.<Event> → matcher groups."""

    runtime: str
    relative_path: Path
    # The runtime's own event names Tachograph registers, and those it gates.
    events: tuple[str, ...]
    gate_events: frozenset[str]
    # The handler's timeout as the runtime spells it (Gemini CLI counts milliseconds).
    timeout: tuple[str, int]
    # Settings the runtime needs beside the hooks for them to fire, merged in if absent.
    extra: Callable[[dict[str, Any]], None] | None = None
    # Undoes `extra` on uninstall; True when it changed the settings.
    remove_extra: Callable[[dict[str, Any]], bool] | None = None

    def path(self, directory: Path) -> Path:
        return directory / self.relative_path

    def is_own(self, entry: object) -> bool:
        """Whether a handler is one Tachograph installed (by its command)."""
        if not isinstance(entry, dict):
            return False
        command = entry.get("command")
        return isinstance(command, str) and bool(own_command(self.runtime).match(command))


def own_command(runtime: str) -> re.Pattern[str]:
    """`[NAME=value ...] <python> -S <…>/hook_client/command.py <runtime>` as `hook install`
    writes it, or `[NAME=value ...] [/abs/path/]tachograph hook <runtime>`, quoted or not."""
    word = r"(?:'[^']*'|\S+)"
    fast = word + r"\s+-S\s+(?:'[^']*/hook_client/command\.py'|\S*/hook_client/command\.py)"
    entry = r"(?:'[^']*/tachograph'|\S*/tachograph|tachograph)\s+hook"
    return re.compile(
        r"^\s*(?:[A-Za-z_][A-Za-z0-9_]*=\S*\s+)*"
        + f"(?:{fast}|{entry})"
        + r"\s+"
        + re.escape(runtime)
        + r"(?:\s|$)"
    )


def hook_command(
    runtime: str, event: str, *, url: str, fail_closed: bool, client_wait_s: int | None = None
) -> str:
    """The command a runtime runs for one event, pinned to one server and interpreter.

    The client runs as a file under this installation's Python with `-S`: the hot path of
    every tool call skips the site machinery (~25 ms of a start, most of it the editable
    install's finder) and needs nothing from the environment but TACHOGRAPH_URL. On an
    event a call can be held on, the client's own wait is pinned too (cli/hook_waits.py).
    """
    client = Path(hook_client.command.__file__).resolve()
    python = sys.executable
    wait = f"TACHOGRAPH_HOOK_TIMEOUT_S={client_wait_s} " if client_wait_s is not None else ""
    command = (
        f"TACHOGRAPH_URL={shlex.quote(url)} {wait}{shlex.quote(python)} -S "
        f"{shlex.quote(str(client))} {runtime} {event}"
    )
    return command + (" --fail-closed" if fail_closed else "")


def base_url(url: str) -> str:
    """Validate the server URL and return it without a trailing slash."""
    if not re.match(r"^https?://[^/\s]+", url) or any(c.isspace() for c in url):
        raise HookFileError(f"hook URL must be an http:// or https:// URL, got {url!r}")
    return url.rstrip("/")


def install_nested(
    spec: NestedHookFile, directory: Path, *, url: str, fail_closed: bool, hold_s: int = 0
) -> Path:
    """Merge one Tachograph handler per event into the runtime's hook file; those on events
    a call can be held on wait longer than a hold of `hold_s` seconds."""
    url = base_url(url)
    path = spec.path(directory)
    settings = read_json_object(path)
    hooks = _hooks_of(settings, path)
    remove_own_entries(hooks, spec.is_own)
    key, value = spec.timeout
    waits = gate_waits(hold_s)
    scale = 1000 if spec.runtime in MILLISECOND_RUNTIMES else 1
    for event in spec.events:
        groups = hooks.setdefault(event, [])
        if not isinstance(groups, list):
            raise HookFileError(f"{path}: hooks.{event} must be a list; nothing was changed")
        gated = fail_closed and event in spec.gate_events
        held = event in HELD_EVENTS[spec.runtime] and waits.client_s is not None
        command = hook_command(
            spec.runtime,
            event,
            url=url,
            fail_closed=gated,
            client_wait_s=waits.client_s if held else None,
        )
        timeout = max(value, waits.runtime_s * scale) if held else value
        groups.append(
            {"matcher": "*", "hooks": [{"type": "command", "command": command, key: timeout}]}
        )
    if spec.extra is not None:
        spec.extra(settings)
    write_json_object(path, settings)
    ignore_beside(path)
    return path


def uninstall_nested(spec: NestedHookFile, directory: Path) -> Path:
    """Remove exactly Tachograph's handlers, and the groups and lists they leave empty."""
    path = spec.path(directory)
    if not path.exists():
        return path
    settings = read_json_object(path)
    had_hooks = "hooks" in settings
    hooks = _hooks_of(settings, path)
    removed = remove_own_entries(hooks, spec.is_own)
    if not hooks and (removed or not had_hooks):
        del settings["hooks"]
    if spec.remove_extra is not None and spec.remove_extra(settings):
        removed = True
    if removed:
        write_json_object(path, settings)
    return path


def _hooks_of(settings: dict[str, Any], path: Path) -> dict[str, Any]:
    hooks = settings.setdefault("hooks", {})
    if not isinstance(hooks, dict):
        raise HookFileError(f"{path}: `hooks` must be a JSON object; nothing was changed")
    return hooks


def inside_git_work_tree(path: Path) -> bool:
    """Whether a path lies in a git work tree (a `.git` entry in it or an ancestor)."""
    return any((parent / ".git").exists() for parent in path.resolve().parents)


def ignore_beside(path: Path) -> None:
    """In a git work tree, make the directory's .gitignore ignore the file and itself."""
    if not inside_git_work_tree(path):
        return
    ignore = path.parent / GITIGNORE
    lines = ignore.read_text(encoding="utf-8").splitlines() if ignore.exists() else []
    missing = [name for name in (path.name, GITIGNORE) if name not in lines]
    if missing:
        ignore.write_text("\n".join([*lines, *missing]) + "\n", encoding="utf-8")


CODEX: Final = NestedHookFile(
    runtime="codex",
    relative_path=Path(".codex") / "hooks.json",
    events=(*codex.NORMALISED_EVENTS, PERMISSION_REQUEST),
    gate_events=codex.FAIL_CLOSED_EVENTS,
    timeout=("timeout", 30),
)

# The variables the hook client reads (hook_client/command.py) that Gemini CLI's
# environment redaction would withhold from a hook: with
# `security.environmentVariableRedaction.enabled` it drops every name holding TOKEN, KEY,
# SECRET, AUTH, ... and in GitHub Actions (GITHUB_SHA set) every name not allow-listed.
# The URL and the executable are pinned in the command; these are allow-listed by name
# (never a value: no credential is written to the file). TACHOGRAPH_API_KEY, the admin
# key, is deliberately not among them. The allow-list is Gemini CLI's one list for hooks
# and its shell tool alike, so with redaction on the agent token reaches both, as it does
# with redaction off (Gemini CLI's default, where hooks get the whole environment).
GEMINI_HOOK_ENV: Final = (
    "TACHOGRAPH_AGENT_TOKEN",
    "TACHOGRAPH_SESSION_ID",
    "TACHOGRAPH_WORKSPACE",
    "TACHOGRAPH_HOOK_LOG",
    "TACHOGRAPH_HOOK_TIMEOUT_S",
)
# Names earlier releases allowed that the hook client no longer reads (it wrote its log
# to TACHOGRAPH_DATA_DIR): removed on install and uninstall alike.
GEMINI_HOOK_ENV_EARLIER: Final = ("TACHOGRAPH_DATA_DIR",)


def _gemini_redaction(settings: dict[str, Any], *, create: bool) -> dict[str, Any] | None:
    """`security.environmentVariableRedaction`, created if asked; None if not an object
    (a user's malformed setting is left alone rather than overwritten)."""
    node: Any = settings
    for key in ("security", "environmentVariableRedaction"):
        if not isinstance(node, dict):
            return None
        if key not in node:
            if not create:
                return None
            node[key] = {}
        node = node[key]
    return node if isinstance(node, dict) else None


def allow_gemini_hook_env(settings: dict[str, Any]) -> None:
    """Merge Tachograph's variable names into Gemini CLI's redaction allow-list (only
    `security.environmentVariableRedaction.allowed`: `security.auth` and the rest stay)."""
    redaction = _gemini_redaction(settings, create=True)
    if redaction is None:
        return
    allowed = redaction.setdefault("allowed", [])
    if isinstance(allowed, list):
        allowed[:] = [name for name in allowed if name not in GEMINI_HOOK_ENV_EARLIER]
        allowed.extend(name for name in GEMINI_HOOK_ENV if name not in allowed)


def disallow_gemini_hook_env(settings: dict[str, Any]) -> bool:
    """Remove exactly those names, and the objects that this alone emptied."""
    redaction = _gemini_redaction(settings, create=False)
    allowed = redaction.get("allowed") if redaction is not None else None
    if redaction is None or not isinstance(allowed, list):
        return False
    ours = (*GEMINI_HOOK_ENV, *GEMINI_HOOK_ENV_EARLIER)
    kept = [name for name in allowed if name not in ours]
    if len(kept) == len(allowed):
        return False
    if kept:
        redaction["allowed"] = kept
    else:
        del redaction["allowed"]
        security = settings["security"]
        if not redaction:
            del security["environmentVariableRedaction"]
        if not security:
            del settings["security"]
    return True


GEMINI: Final = NestedHookFile(
    runtime="gemini",
    relative_path=Path(".gemini") / "settings.json",
    events=gemini_cli.INSTALLED_EVENTS,
    gate_events=gemini_cli.GATE_EVENTS,
    timeout=("timeout", 30_000),  # milliseconds
    extra=allow_gemini_hook_env,
    remove_extra=disallow_gemini_hook_env,
)
# With TACHOGRAPH_GEMINI_MODEL_EVENTS=store at install time, also the events of every
# model call (each one more process per call, so only when they are to be stored).
GEMINI_WITH_MODEL_EVENTS: Final = replace(
    GEMINI, events=(*gemini_cli.INSTALLED_EVENTS, *gemini_cli.INSTALLED_MODEL_EVENTS)
)


def nested_spec(runtime: str, env: Mapping[str, str]) -> NestedHookFile:
    """The hook file of a runtime, as the installing environment asks for it."""
    store = (env.get("TACHOGRAPH_GEMINI_MODEL_EVENTS") or "").strip().lower()
    if runtime == GEMINI.runtime and store == gemini_cli.MODEL_EVENTS_STORE:
        return GEMINI_WITH_MODEL_EVENTS
    return NESTED[runtime]


# Qwen Code reads `hooks` from the same settings file as the rest of its configuration;
# it passes hooks its whole environment, so nothing needs allow-listing.
QWEN: Final = NestedHookFile(
    runtime="qwen",
    relative_path=Path(".qwen") / "settings.json",
    events=qwen_code.INSTALLED_EVENTS,
    gate_events=qwen_code.FAIL_CLOSED_EVENTS,
    timeout=("timeout", 30_000),  # milliseconds
)
# Factory Droid reads `hooks` beside its `customModels` in one settings file.
DROID: Final = NestedHookFile(
    runtime="droid",
    relative_path=Path(".factory") / "settings.json",
    events=factory_droid.NORMALISED_EVENTS,
    gate_events=factory_droid.FAIL_CLOSED_EVENTS,
    timeout=("timeout", 30),
)

NESTED: Final[dict[str, NestedHookFile]] = {
    spec.runtime: spec for spec in (CODEX, GEMINI, QWEN, DROID)
}
