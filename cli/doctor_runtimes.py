"""`tachograph doctor`'s look at the agent runtimes' hook files (§6.5).

For each runtime's hook file found in the project directories named on the command line,
the workspace root, a workspace below it or the home directory: are Tachograph's hooks
registered, does each command resolve to an executable (and the hook client it runs),
does the server URL the hooks use answer as Tachograph, and does it accept the agent token
they will send? A closed handler is also worth a warning wherever a gate event's hook
fails open when the server is down: an HTTP hook always does, a command hook unless
installed with `--fail-closed`. A directory named that holds none of Tachograph's hooks is
a warning too: whoever named it expected some.
"""

from __future__ import annotations

import contextlib
import json
import shlex
import shutil
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Final

from cli.copilot_hooks import HOOK_FILE as COPILOT_FILE
from cli.hook_waits import installed_plugin_settings
from cli.runtime_hooks import NESTED, own_command
from infra.settings import Settings
from ingest.runtimes.runtimes import RUNTIMES

# Runtime -> hook file relative to a home or project directory (cli/runtime_hooks.py,
# cli/claude_settings.py write them).
HOOK_FILES: Final[dict[str, Path]] = {
    "claude": Path(".claude") / "settings.local.json",
    **{name: spec.relative_path for name, spec in NESTED.items()},
    "copilot": COPILOT_FILE,
}
# The key every runtime's hooks send (the command client, and the HTTP hooks' header).
AGENT_TOKEN_ENV: Final = "TACHOGRAPH_AGENT_TOKEN"
FAIL_CLOSED_FLAG: Final = "--fail-closed"


def project_dirs(settings: Settings, named: Sequence[Path] = ()) -> list[Path]:
    """The directories where `hook install` may have written project hook files: those
    named, the workspace root and the workspaces right below it."""
    root = settings.workspace_root
    below: list[Path] = []
    with contextlib.suppress(OSError):
        below = sorted(p for p in root.iterdir() if p.is_dir())
    return list(dict.fromkeys([*named, root, *below]))


def runtime_hook_findings(
    settings: Settings, env: Mapping[str, str], named: Sequence[Path] = ()
) -> tuple[list[str], str]:
    """Warnings about the runtimes' hook files, and a one-line summary when all is well."""
    findings: list[str] = []
    seen: list[str] = []
    failing_open: list[str] = []
    with_hooks: set[Path] = set()
    for root, runtime, path in _hook_files(settings, env, named):
        handlers = [(event, h) for event, h in _handlers(path) if _own(runtime, h)]
        if not handlers:
            continue
        with_hooks.add(root)
        seen.append(f"{runtime} ({path})")
        urls: set[str] = set()
        open_gates: set[str] = set()
        for event, handler in handlers:
            command, url = handler.get("command"), handler.get("url")
            if isinstance(command, str):
                findings.extend(_unresolved(runtime, path, command))
                urls.update(_pinned_url(command) or [env.get("TACHOGRAPH_URL") or _DEFAULT])
            elif isinstance(url, str):
                urls.add(url.split("/hooks/")[0])
            if _is_gate(runtime, event) and not _fails_closed(command):
                open_gates.add(event)
        if open_gates:
            failing_open.append(f"{path} ({', '.join(sorted(open_gates))})")
        for url in sorted(urls):
            problem = _unreachable(url) or _refused_token(url, runtime, env.get(AGENT_TOKEN_ENV))
            if problem:
                findings.append(f"{path}: {runtime} hooks reach {url}, which {problem}")
    for root, finding, seen_as, open_gate in plugin_findings(settings, env, named):
        with_hooks.add(root)
        seen.append(seen_as)
        findings.extend(finding)
        failing_open.extend(open_gate)
    closed = [
        handler.id
        for handlers in settings.hooks.handlers.values()
        for handler in handlers
        if handler.failure_mode == "closed"
    ]
    if closed and failing_open:
        findings.append(
            f"closed handler(s) {', '.join(sorted(closed))} are configured, but these gate "
            f"hooks fail open when the server is down (HTTP hooks always do, commands without "
            f"{FAIL_CLOSED_FLAG} too): {'; '.join(failing_open)}; re-run `tachograph hook "
            f"install <runtime> <dir> {FAIL_CLOSED_FLAG}`"
        )
    looked_for = ", ".join(map(str, HOOK_FILES.values()))
    for project in named:
        if project not in with_hooks:
            install = f"tachograph hook install <runtime> {shlex.quote(str(project))}"
            findings.append(
                f"no Tachograph hooks in {project} (looked for {looked_for}); "
                f"install them with `{install}`"
            )
    summary = "; ".join(seen) if seen else "no runtime hook files with Tachograph's hooks found"
    if seen and not env.get(AGENT_TOKEN_ENV):
        summary += f" ({AGENT_TOKEN_ENV} unset here, so the agent token was not checked)"
    return list(dict.fromkeys(findings)), summary  # one line per finding, not per event


def plugin_findings(
    settings: Settings, env: Mapping[str, str], named: Sequence[Path]
) -> Iterator[tuple[Path, list[str], str, list[str]]]:
    """For each Tachograph plugin of OpenCode or Kilo found: its directory, the problems
    found, how it is named in the summary, and its gates if they fail open."""
    from cli.opencode_plugin import PLUGIN_RUNTIMES, sdk_start_up_wait

    roots = project_dirs(settings, named) + ([Path(env["HOME"])] if env.get("HOME") else [])
    done: set[Path] = set()
    for root in roots:
        for spec in PLUGIN_RUNTIMES.values():
            path = spec.path(root)
            installed = installed_plugin_settings(path)
            if installed is None or path.resolve() in done:
                continue
            done.add(path.resolve())
            problems: list[str] = []
            url = str(installed.get("url", "")).split("/hooks/")[0]
            token = env.get(AGENT_TOKEN_ENV)
            problem = _unreachable(url) or _refused_token(url, spec.runtime, token)
            if problem:
                problems.append(f"{path}: {spec.runtime} hooks reach {url}, which {problem}")
            if wait := sdk_start_up_wait(spec, spec.config(root)):
                problems.append(f"{path}: {wait}")
            gates = (
                []
                if installed.get("failClosed")
                else [f"{path} (chat.message, tool.execute.before)"]
            )
            yield root, problems, f"{spec.runtime} ({path})", gates


def _is_gate(runtime: str, event: str) -> bool:
    """Whether a registration is one of the events a fail-closed install gates."""
    adapter = RUNTIMES[runtime]
    try:
        ev = adapter.to_event({}, event)
    except ValueError:
        ev = None
    normalised = ev.event if ev is not None else event
    return normalised in adapter.gate_events


def _fails_closed(command: object) -> bool:
    return isinstance(command, str) and FAIL_CLOSED_FLAG in command.split()


_DEFAULT: Final = "http://127.0.0.1:8000"


def _hook_files(
    settings: Settings, env: Mapping[str, str], named: Sequence[Path]
) -> Iterator[tuple[Path, str, Path]]:
    """(directory, runtime, hook file) for each hook file found, each file once."""
    roots = project_dirs(settings, named)
    if env.get("HOME"):
        roots.append(Path(env["HOME"]))
    found: set[Path] = set()
    for root in roots:
        for runtime, relative in HOOK_FILES.items():
            path = root / relative
            if path.is_file() and path.resolve() not in found:
                found.add(path.resolve())
                yield root, runtime, path


def _handlers(path: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    """Each handler of a hook file with the event it is registered for."""
    try:
        hooks = json.loads(path.read_text(encoding="utf-8")).get("hooks")
    except (OSError, ValueError, AttributeError):
        return
    for event, groups in hooks.items() if isinstance(hooks, dict) else []:
        for group in groups if isinstance(groups, list) else []:
            if isinstance(group, dict) and "hooks" not in group:
                yield event, _as_nested(group)  # Copilot CLI lists its handlers directly
                continue
            entries = group.get("hooks") if isinstance(group, dict) else None
            for entry in entries if isinstance(entries, list) else []:
                if isinstance(entry, dict):
                    yield event, entry


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
        # Hooks of earlier releases called `tachograph` by name; today's pin the client.
        fix = "" if "/" in program else "; re-run `tachograph hook install` to pin its path"
        return [
            f"{path}: {runtime} hooks run {program}, which does not exist or is not on PATH{fix}"
        ]
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
    except urllib.error.HTTPError as exc:
        # With an admin key set, health is for readers: a refusal in Tachograph's own
        # shape still says who answered, and the agent token's probe follows.
        if exc.code == 401 and _error_code(exc.read(65536)) == "unauthorized":
            return None
        return f"does not answer ({type(exc).__name__}: {exc})"
    except Exception as exc:  # noqa: BLE001 - any failure is the finding
        return f"does not answer ({type(exc).__name__}: {exc})"
    if not isinstance(body, dict) or "projections" not in body:
        return "answers, but not as a Tachograph server"
    return None


def _refused_token(url: str, runtime: str, token: str | None) -> str | None:
    """None when the server takes `token` on the runtime's hook route, else why not.

    The probe is an empty body: the key is checked before the body, and an empty body is
    refused (422) without anything being recorded.
    """
    if not token:
        return None
    request = urllib.request.Request(
        f"{url}/hooks/{runtime}",
        data=b"{}",
        headers={"content-type": "application/json", "x-tachograph-key": token},
        method="POST",
    )
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(request, timeout=3):
            return None
    except urllib.error.HTTPError as exc:
        if exc.code in (401, 403):
            message = _error_message(exc.read(65536))
            return f"refuses the agent token in {AGENT_TOKEN_ENV} (HTTP {exc.code}: {message})"
        return None  # the key passed; the empty body was refused, as it should be
    except Exception as exc:  # noqa: BLE001 - any failure is the finding
        return f"could not be asked about the agent token ({type(exc).__name__}: {exc})"


def _error_field(raw: bytes, name: str) -> str | None:
    """One field of an API error body (`{error, message}`), None when it has none."""
    try:
        body = json.loads(raw)
    except ValueError:
        return None
    value = body.get(name) if isinstance(body, dict) else None
    return value if isinstance(value, str) else None


def _error_message(raw: bytes) -> str:
    return _error_field(raw, "message") or "no message"


def _error_code(raw: bytes) -> str | None:
    return _error_field(raw, "error")
