"""`tachograph hook install|uninstall opencode|kilo <dir>`: Tachograph's OpenCode plugin (§6.5).

OpenCode (and Kilo, its fork) runs JavaScript plugins in its own process, from
`plugin/` in its configuration directory (`<dir>/.config/opencode/`, Kilo's
`<dir>/.config/kilo/`). The installer writes one file there, `tachograph.js`
(cli/opencode_plugin.js with this install's settings: the server URL, pinned, and how long
a held call is waited for); the user's own plugins are left as they are. The plugin
imports no package: it needs no install and no network.

Before it loads any plugin, OpenCode installs its plugin SDK (`@opencode-ai/plugin`,
Kilo's `@kilocode/plugin`) into the configuration directory and waits for that install;
offline it fails after ~70 s. It skips the install when the directory has `node_modules`
and its `package-lock.json` lists the SDK among the directory's dependencies. Where the SDK
is not installed, the installer records it so (an empty `node_modules`, and the SDK in the
lock's root dependencies): OpenCode starts at once, online or not, and does not install
the SDK; a plugin of the user's that imports it at run time then needs `npm install` of it
there. `uninstall` removes exactly that record again while the SDK is still absent.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import ingest.runtimes.opencode as opencode
from cli.hook_files import HookFileError, read_json_object, write_json_object
from cli.hook_waits import (
    CLIENT_DEFAULT_S,
    HELD_PLUGIN_HOOKS,
    PLUGIN_FILES,
    gate_waits,
    is_own_plugin,
)
from hook_client.command import FAIL_CLOSED_REASON

TEMPLATE: Final = Path(__file__).with_name("opencode_plugin.js")
LOCK: Final = "package-lock.json"
NODE_MODULES: Final = "node_modules"


@dataclass(frozen=True)
class PluginRuntime:
    runtime: str
    title: str
    config_dir: Path  # relative to the home directory named
    sdk: str  # the plugin SDK package OpenCode installs into its configuration directory

    def config(self, directory: Path) -> Path:
        return directory / self.config_dir

    def path(self, directory: Path) -> Path:
        return directory / PLUGIN_FILES[self.runtime]


OPENCODE: Final = PluginRuntime(
    "opencode", "OpenCode", Path(".config") / "opencode", "@opencode-ai/plugin"
)
KILO: Final = PluginRuntime("kilo", "Kilo", Path(".config") / "kilo", "@kilocode/plugin")
PLUGIN_RUNTIMES: Final[dict[str, PluginRuntime]] = {r.runtime: r for r in (OPENCODE, KILO)}


def plugin_source(spec: PluginRuntime, *, url: str, fail_closed: bool, hold_s: int) -> str:
    """The plugin file for one server: the template with this install's settings."""
    waits = gate_waits(hold_s)
    settings = {
        "url": f"{url}/hooks/{spec.runtime}",
        "failClosed": fail_closed,
        "gates": sorted(opencode.FAIL_CLOSED_EVENTS),
        "failClosedReason": FAIL_CLOSED_REASON,
        "waitS": CLIENT_DEFAULT_S,
        "heldHooks": list(HELD_PLUGIN_HOOKS),
        "heldWaitS": waits.client_s if waits.client_s is not None else CLIENT_DEFAULT_S,
        "busEvents": dict(opencode.BUS_EVENTS),
    }
    text = TEMPLATE.read_text(encoding="utf-8")
    text = text.replace("__RUNTIME_TITLE__", spec.title).replace("__RUNTIME__", spec.runtime)
    return text.replace("__SETTINGS__", json.dumps(settings, ensure_ascii=False))


def install_plugin(
    spec: PluginRuntime, directory: Path, *, url: str, fail_closed: bool, hold_s: int
) -> tuple[Path, str | None]:
    """Write the plugin (replacing Tachograph's own from an earlier install) and keep
    OpenCode from installing its SDK at start-up; the path, and a note for the user."""
    from cli.runtime_hooks import base_url, ignore_beside

    path = spec.path(directory)
    if path.exists() and not is_own_plugin(path):
        raise HookFileError(f"{path} exists and is not Tachograph's plugin; nothing was changed")
    source = plugin_source(spec, url=base_url(url), fail_closed=fail_closed, hold_s=hold_s)
    note = _record_sdk(spec, spec.config(directory))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(source, encoding="utf-8")
    ignore_beside(path)
    return path, note


def uninstall_plugin(spec: PluginRuntime, directory: Path) -> Path:
    """Remove the plugin and the SDK record the install made (while the SDK is absent)."""
    path = spec.path(directory)
    if path.exists() and is_own_plugin(path):
        path.unlink()
    _release_sdk(spec, spec.config(directory))
    return path


def sdk_installed(spec: PluginRuntime, config: Path) -> bool:
    return (config / NODE_MODULES / spec.sdk / "package.json").is_file()


def sdk_start_up_wait(spec: PluginRuntime, config: Path) -> str | None:
    """Why the runtime would try to install its SDK at start-up (and wait for it), if it would."""
    if sdk_installed(spec, config):
        return None
    try:
        lock = json.loads((config / LOCK).read_text(encoding="utf-8"))
        listed = spec.sdk in lock["packages"][""]["dependencies"]
    except (OSError, ValueError, KeyError, TypeError):
        listed = False
    if listed and (config / NODE_MODULES).is_dir():
        return None
    return (
        f"{spec.sdk} is neither installed nor recorded in {config}, so {spec.title} installs "
        f"it before loading any plugin (offline it waits ~70 s); re-run `tachograph hook "
        f"install {spec.runtime}`"
    )


def _record_sdk(spec: PluginRuntime, config: Path) -> str | None:
    """Record the SDK as the configuration directory's dependency where it is not
    installed, so OpenCode does not try (and, offline, wait) to install it."""
    if sdk_installed(spec, config):
        return None
    lock_path = config / LOCK
    lock = read_json_object(lock_path)
    root = _lock_root(lock, lock_path)
    dependencies = root.setdefault("dependencies", {})
    if not isinstance(dependencies, dict):
        raise HookFileError(f"{lock_path}: packages[''].dependencies must be an object")
    if spec.sdk in dependencies and (config / NODE_MODULES).is_dir():
        return None
    dependencies[spec.sdk] = "*"
    lock.setdefault("lockfileVersion", 3)
    (config / NODE_MODULES).mkdir(parents=True, exist_ok=True)
    write_json_object(lock_path, lock)
    return (
        f"{spec.sdk} is not installed in {config}: recorded in its {LOCK} so {spec.title} does "
        f"not try to install it at start-up (a plugin of yours that imports it needs "
        f"`npm install {spec.sdk}` there)"
    )


def _release_sdk(spec: PluginRuntime, config: Path) -> None:
    """Undo `_record_sdk`: the SDK's lock entry while it is not installed, the lock and
    `node_modules` when that leaves them empty."""
    lock_path = config / LOCK
    if sdk_installed(spec, config) or not lock_path.is_file():
        return
    lock = read_json_object(lock_path)
    root = _lock_root(lock, lock_path)
    dependencies = root.get("dependencies")
    if not isinstance(dependencies, dict) or spec.sdk not in dependencies:
        return
    del dependencies[spec.sdk]
    if not dependencies:
        del root["dependencies"]
    if lock.get("packages") == {"": {}} and set(lock) <= {"packages", "lockfileVersion"}:
        lock_path.unlink()
        node_modules = config / NODE_MODULES
        if node_modules.is_dir() and not any(node_modules.iterdir()):
            node_modules.rmdir()
    else:
        write_json_object(lock_path, lock)


def _lock_root(lock: dict[str, Any], path: Path) -> dict[str, Any]:
    packages = lock.setdefault("packages", {})
    root = packages.setdefault("", {}) if isinstance(packages, dict) else None
    if not isinstance(root, dict):
        raise HookFileError(f'{path}: `packages` must hold an object under ""; nothing changed')
    return root
