"""`tachograph doctor`'s look at the agent runtimes' hook files (§6.5).

For each runtime's hook file found in the home directory, the workspace root or a
workspace below it: are Tachograph's hooks registered, does each command resolve to an
executable (and the hook client it runs), and does the server URL the hooks use answer
as Tachograph? A closed handler is also worth a warning where agents reach Tachograph
over HTTP hooks only: those fail open when the server is down.
"""

from __future__ import annotations

import contextlib
import json
import shlex
import shutil
import urllib.request
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Final

from cli.copilot_hooks import HOOK_FILE as COPILOT_FILE
from cli.runtime_hooks import NESTED, own_command
from infra.settings import Settings

# Runtime -> hook file relative to a home or project directory (cli/runtime_hooks.py,
# cli/claude_settings.py write them).
HOOK_FILES: Final[dict[str, Path]] = {
    "claude": Path(".claude") / "settings.local.json",
    **{name: spec.relative_path for name, spec in NESTED.items()},
    "copilot": COPILOT_FILE,
}
GATES: Final = frozenset({"PreToolUse", "BeforeTool", "preToolUse", "PermissionRequest"})


def runtime_hook_findings(settings: Settings, env: Mapping[str, str]) -> tuple[list[str], str]:
    """Warnings about the runtimes' hook files, and a one-line summary when all is well."""
    findings: list[str] = []
    seen: list[str] = []
    http_only_gates = False
    for runtime, path in _hook_files(settings, env):
        handlers = [h for h in _handlers(path) if _own(runtime, h)]
        if not handlers:
            continue
        seen.append(f"{runtime} ({path})")
        urls: set[str] = set()
        commands = 0
        for handler in handlers:
            command, url = handler.get("command"), handler.get("url")
            if isinstance(command, str):
                commands += 1
                findings.extend(_unresolved(runtime, path, command))
                urls.update(_pinned_url(command) or [env.get("TACHOGRAPH_URL") or _DEFAULT])
            elif isinstance(url, str):
                urls.add(url.split("/hooks/")[0])
        if commands == 0:
            http_only_gates = True
        for url in sorted(urls):
            problem = _unreachable(url)
            if problem:
                findings.append(f"{path}: {runtime} hooks reach {url}, which {problem}")
    closed = [
        handler.id
        for handlers in settings.hooks.handlers.values()
        for handler in handlers
        if handler.failure_mode == "closed"
    ]
    if closed and http_only_gates:
        findings.append(
            f"closed handler(s) {', '.join(sorted(closed))} are configured, but some agents "
            "reach Tachograph over HTTP hooks only, which fail open when the server is down; "
            "install their gate events as command hooks with `--fail-closed`"
        )
    summary = "; ".join(seen) if seen else "no runtime hook files with Tachograph's hooks found"
    return list(dict.fromkeys(findings)), summary  # one line per finding, not per event


_DEFAULT: Final = "http://127.0.0.1:8000"


def _hook_files(settings: Settings, env: Mapping[str, str]) -> Iterator[tuple[str, Path]]:
    roots = [settings.workspace_root]
    with contextlib.suppress(OSError):
        roots += sorted(p for p in settings.workspace_root.iterdir() if p.is_dir())
    if env.get("HOME"):
        roots.append(Path(env["HOME"]))
    found: set[Path] = set()
    for root in roots:
        for runtime, relative in HOOK_FILES.items():
            path = root / relative
            if path.is_file() and path.resolve() not in found:
                found.add(path.resolve())
                yield runtime, path


def _handlers(path: Path) -> Iterator[dict[str, Any]]:
    try:
        hooks = json.loads(path.read_text(encoding="utf-8")).get("hooks")
    except (OSError, ValueError, AttributeError):
        return
    for groups in hooks.values() if isinstance(hooks, dict) else []:
        for group in groups if isinstance(groups, list) else []:
            if isinstance(group, dict) and "hooks" not in group:
                yield _as_nested(group)  # Copilot CLI lists its handlers directly
                continue
            entries = group.get("hooks") if isinstance(group, dict) else None
            for entry in entries if isinstance(entries, list) else []:
                if isinstance(entry, dict):
                    yield entry


def _as_nested(entry: dict[str, Any]) -> dict[str, Any]:
    """A Copilot CLI handler (`bash` holds its command) in the nested runtimes' terms."""
    if isinstance(entry.get("bash"), str):
        return {**entry, "command": entry["bash"]}
    return entry


def _own(runtime: str, handler: dict[str, Any]) -> bool:
    command, url = handler.get("command"), handler.get("url")
    if isinstance(command, str):
        return bool(own_command(runtime).match(command))
    return isinstance(url, str) and f"/hooks/{runtime}" in url


def _unresolved(runtime: str, path: Path, command: str) -> list[str]:
    try:
        words = [w for w in shlex.split(command) if "=" not in w.split("/")[0]]
    except ValueError:
        return [f"{path}: a {runtime} hook command cannot be parsed: {command}"]
    if not words:
        return [f"{path}: a {runtime} hook has an empty command"]
    program = words[0]
    if shutil.which(program) is None:
        return [f"{path}: {runtime} hooks run {program}, which does not exist or is not on PATH"]
    client = next((w for w in words if w.endswith("hook_client/command.py")), None)
    if client is not None and not Path(client).is_file():
        return [f"{path}: {runtime} hooks run {client}, which does not exist; re-run hook install"]
    return []


def _pinned_url(command: str) -> list[str]:
    for word in shlex.split(command):
        if word.startswith("TACHOGRAPH_URL="):
            return [word.split("=", 1)[1].rstrip("/")]
    return []


def _unreachable(url: str) -> str | None:
    """None when `url` answers /api/health as Tachograph, else what went wrong."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(url + "/api/health", timeout=3) as response:
            body = json.loads(response.read(65536))
    except Exception as exc:  # noqa: BLE001 - any failure is the finding
        return f"does not answer ({type(exc).__name__}: {exc})"
    if not isinstance(body, dict) or "projections" not in body:
        return "answers, but not as a Tachograph server"
    return None
