"""Per-hook latency: every runtime's command hook spawned as the runtime spawns it, and the
native HTTP hook, beside a bare `cat` hook and Tracekit's Claude Code hook, in one run.

All contenders take their calls in turns, the order rotated every round: timed one after
the other, a burst of load from elsewhere on a shared 2-core machine lands in one series
only. Each call's answer is checked after its timer stops, so a hook that silently failed
open (exit 0, nothing printed) cannot pass for a fast one.
"""

from __future__ import annotations

import http.client
import json
import os
import select
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from bench.gateway import percentiles
from bench.plugin_hooks import close_all, plugin_figures, plugin_hooks
from bench.servers import Store, free_port, serve

REPO: Final = Path(__file__).resolve().parents[1]
FIXTURES: Final = REPO / "tests" / "fixtures"
TRACEKIT_SCRIPT: Final = REPO / "scripts" / "tracekit"
# Each runtime's pre-tool payload as the real CLI wrote it, and its event as it names it.
PAYLOADS: Final = {
    "claude": ("claude-code-2.1.328/basic/03-PreToolUse.json", "PreToolUse"),
    "codex": ("codex/basic/03-PreToolUse.json", "PreToolUse"),
    "gemini": ("gemini/basic/07-BeforeTool.json", "BeforeTool"),
    "copilot": ("copilot/basic/04-preToolUse.json", "preToolUse"),
    "qwen": ("qwen-code/basic/05-PreToolUse.json", "PreToolUse"),
    "droid": ("factory-droid/basic/02-PreToolUse.json", "PreToolUse"),
}
# Runtimes that run a hook file Tachograph writes (no command line in a settings file):
# their payload, and where `hook install` puts the pre-tool file under a home.
FILE_HOOKS: Final = {
    "cline": ("cline/basic/02-PreToolUse.json", Path(".cline") / "hooks" / "PreToolUse"),
}
CLAUDE_HTTP_BODY: Final = "claude-code-2.1.328/basic/http/02-PreToolUse.http.json"
HTTP_TARGET_P50_MS: Final = 3.0
COMMAND_TARGET_VS_TRACEKIT: Final = 0.25
WARM_UP: Final = 5
SPAWN_TIMEOUT_S: Final = 60


@dataclass(frozen=True)
class Contender:
    """One hook to time: `run(i)` makes call `i`; `problem(i, outcome)` says what was wrong
    with its answer, if anything."""

    run: Callable[[int], Any]
    problem: Callable[[int, Any], str | None]


def payload(relative: str, root: Path, tag: str) -> Callable[[int], bytes]:
    """Call `i`'s body: the captured payload, its tool call id (if it has one) its own, since
    a repeated id is a redelivery and is answered from the log instead."""
    text = (FIXTURES / relative).read_text(encoding="utf-8").replace("<WORK>", str(root))
    body = json.loads(text)

    def nth(i: int) -> bytes:
        if "tool_use_id" in body:
            return json.dumps({**body, "tool_use_id": f"{body['tool_use_id']}-{tag}-{i}"}).encode()
        return json.dumps(body).encode()

    return nth


def spawned(
    command: str, env: dict[str, str], cwd: Path, body: Callable[[int], bytes]
) -> Callable[[int], subprocess.CompletedProcess[bytes]]:
    """As the runtimes run a command hook: `sh -c`, the payload on stdin, stdout read to its
    end and the exit waited for."""

    def run(i: int) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run(
            ["sh", "-c", command],
            input=body(i),
            capture_output=True,
            env=env,
            cwd=cwd,
            timeout=SPAWN_TIMEOUT_S,
            check=False,
        )

    return run


def answered_json(_: int, done: subprocess.CompletedProcess[bytes]) -> str | None:
    """Tachograph's hook delivered: exit 0 and a JSON object on stdout (a hook that could not
    deliver prints nothing)."""
    try:
        answer = json.loads(done.stdout)
    except ValueError:
        answer = None
    if done.returncode == 0 and isinstance(answer, dict):
        return None
    return f"exit {done.returncode}, stdout {done.stdout[:200]!r}, stderr {done.stderr[-300:]!r}"


def failed_open(_: int, done: subprocess.CompletedProcess[bytes]) -> str | None:
    if done.returncode == 0 and not done.stdout.strip():
        return None
    return f"exit {done.returncode}, stdout {done.stdout[:200]!r}"


def allowed(_: int, done: subprocess.CompletedProcess[bytes]) -> str | None:
    """Tracekit lets a call run with exit 0 (2 blocks it)."""
    if done.returncode == 0:
        return None
    return f"exit {done.returncode}, stderr {done.stderr[-300:]!r}"


# Where each runtime's installer writes its hook file in a home or project directory,
# and how the pre-tool entry's command is read back from it.
HOOK_FILES: Final = {
    "claude": (Path(".claude") / "settings.local.json", "command", True),
    "codex": (Path(".codex") / "hooks.json", "command", True),
    "gemini": (Path(".gemini") / "settings.json", "command", True),
    "copilot": (Path(".copilot") / "hooks" / "tachograph.json", "bash", False),
    "qwen": (Path(".qwen") / "settings.json", "command", True),
    "droid": (Path(".factory") / "settings.json", "command", True),
}


def installed_command(runtime: str, url: str, home: Path) -> str:
    """The pre-tool command `tachograph hook install <runtime>` writes, read back from its
    file: measured exactly as a user's install runs it."""
    subprocess.run(
        [sys.executable, "-m", "cli.main", "hook", "install", runtime, str(home), "--url", url],
        check=True,
        capture_output=True,
        timeout=60,
    )
    relative, key, nested = HOOK_FILES[runtime]
    event = PAYLOADS[runtime][1]
    entry = json.loads((home / relative).read_text())["hooks"][event][0]
    return str((entry["hooks"][0] if nested else entry)[key])


def installed_commands(url: str, root: Path) -> dict[str, str]:
    """The pre-tool command of each runtime, each installed in a home of its own."""
    return {runtime: installed_command(runtime, url, root / runtime) for runtime in HOOK_FILES}


def file_hook(runtime: str, url: str, root: Path, env: dict[str, str]) -> tuple[str, Contender]:
    """A runtime's pre-tool hook file as `tachograph hook install <runtime>` writes it, run as
    the runtime runs it (Cline: `sh <file>`, from its shebang) with its captured payload,
    each call its own tool call id."""
    home, project = root / runtime, root / "project"
    subprocess.run(
        [sys.executable, "-m", "cli.main", "hook", "install", runtime, str(home), "--url", url],
        check=True,
        capture_output=True,
        timeout=60,
    )
    relative, hook = FILE_HOOKS[runtime]
    text = (FIXTURES / relative).read_text(encoding="utf-8").replace("<WORK>", str(project))
    body = json.loads(text)

    def run(i: int) -> subprocess.CompletedProcess[bytes]:
        call = {**body["tool_call"], "id": f"{body['tool_call']['id']}-{i}"}
        return subprocess.run(
            ["sh", str(home / hook)],
            input=json.dumps({**body, "tool_call": call}).encode(),
            capture_output=True,
            env=env,
            cwd=project,
            timeout=SPAWN_TIMEOUT_S,
            check=False,
        )

    return f"sh {home / hook}", Contender(run, answered_json)


@dataclass
class Tracekit:
    """Tracekit's Claude Code PreToolUse hook as its documented setup registers it."""

    version: str
    command: str
    env: dict[str, str]
    runtime_dir: Path

    def stop_signer(self) -> None:
        """Stop the dev signer the first hook started (it outlives the hooks by design)."""
        try:
            pid = int(json.loads((self.runtime_dir / "endpoint.json").read_text())["pid"])
            os.kill(pid, signal.SIGTERM)
        except (OSError, ValueError, KeyError):
            return
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                os.kill(pid, 0)
            except OSError:
                return
            time.sleep(0.1)


def tracekit(install: bool, root: Path, env: dict[str, str]) -> Tracekit | str:
    """Set up Tracekit in a HOME of its own, or say why it is unavailable.

    With `install` (a full run) the pinned Tracekit is installed (scripts/tracekit) if it
    is not cached, which needs PyPI. Without (a quick run: the suite's smoke run) only the
    cache is used, and Tracekit is reported unavailable if it is not there: the suite must
    not depend on the network.
    """
    where = subprocess.run(
        [str(TRACEKIT_SCRIPT), *([] if install else ["--cached"])],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    if where.returncode != 0:
        return (where.stderr.strip().splitlines() or ["scripts/tracekit failed"])[-1]
    executable = Path(where.stdout.strip())
    home, project, runtime_dir = root / "tracekit-home", root / "tracekit-project", root / "tk"
    for directory in (home, project):
        directory.mkdir(parents=True)
    runtime_dir.mkdir(mode=0o700)
    # Its runtime dir (the dev signer's Unix socket and the hooks' state) under this run's
    # own directory: the signer must be this run's, not one of the user's.
    own = {**env, "HOME": str(home), "TRACEKIT_RUNTIME_DIR": str(runtime_dir)}
    init = subprocess.run(
        [str(executable), "init", "--dev", "--v2"],
        cwd=project,
        env=own,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    settings = [*home.glob(".claude/settings*.json"), *project.glob(".claude/settings*.json")]
    hooks = [json.loads(path.read_text()).get("hooks", {}) for path in settings]
    registered = [h["PreToolUse"][0]["hooks"][0]["command"] for h in hooks if "PreToolUse" in h]
    if init.returncode != 0 or not registered:
        return f"`tracekit init --dev --v2` registered no PreToolUse hook: {init.stderr[-300:]}"
    version = subprocess.run(
        [str(executable.parent / "python"), "-c", "import tracekit; print(tracekit.__version__)"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout.strip()
    return Tracekit(version, registered[0], own, runtime_dir)


class HttpHook:
    """POST /hooks/claude as Claude Code sends its HTTP hooks: over a kept-alive connection,
    a new one once the server has closed it (after its 5 s idle timeout), as a client's
    connection pool does; or a new connection per call."""

    def __init__(self, port: int, body: Callable[[int], bytes], *, keep_alive: bool) -> None:
        self.port, self.body, self.keep_alive = port, body, keep_alive
        self.conn: http.client.HTTPConnection | None = None
        self.connections = 0  # opened, warm-up included

    def __call__(self, i: int) -> tuple[int, bytes]:
        if self.conn is None or _closed_by_server(self.conn):
            if self.conn is not None:
                self.conn.close()
            self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
            self.connections += 1
        try:
            self.conn.request(
                "POST", "/hooks/claude", self.body(i), {"content-type": "application/json"}
            )
            response = self.conn.getresponse()
            return response.status, response.read()
        finally:
            if not self.keep_alive:
                self.conn.close()
                self.conn = None

    @staticmethod
    def problem(_: int, outcome: tuple[int, bytes]) -> str | None:
        status, raw = outcome
        return None if status == 200 and raw.startswith(b"{") else f"HTTP {status}: {raw[:200]!r}"


def _closed_by_server(conn: http.client.HTTPConnection) -> bool:
    """An idle kept-alive connection has nothing to read, unless the server has closed it."""
    if conn.sock is None:
        return False  # not connected yet: the request connects
    readable, _, _ = select.select([conn.sock], [], [], 0)
    return bool(readable)


def round_robin(contenders: dict[str, Contender], n: int) -> tuple[dict[str, Any], list[str]]:
    """`n` timed calls of each, in turns, the order rotated every round; and what went wrong."""
    names = list(contenders)
    samples: dict[str, list[float]] = {name: [] for name in names}
    errors = {name: 0 for name in names}
    problems: list[str] = []
    for i in range(n):
        shift = i % len(names)
        for name in names[shift:] + names[:shift]:
            started = time.perf_counter()
            outcome = contenders[name].run(i)
            samples[name].append(time.perf_counter() - started)
            problem = contenders[name].problem(i, outcome)
            if problem is not None:
                errors[name] += 1
                problems.append(f"{name} call {i}: {problem}")
    return {
        name: {**percentiles(samples[name]), "errors": errors[name]} for name in names
    }, problems


def warm(contenders: dict[str, Contender], n: int) -> dict[str, str]:
    """A few untimed calls of each (the first creates the session, Tracekit's first starts
    its signer, the files read get into the page cache); the first problem of each
    contender that had one."""
    failed: dict[str, str] = {}
    for name, contender in contenders.items():
        for i in range(n, n + WARM_UP):
            problem = contender.problem(i, contender.run(i))
            if problem is not None:
                failed.setdefault(name, problem)
    return failed


def bench_hook_latency(
    store: Store, n: int, work: Path, *, install_tracekit: bool = True
) -> dict[str, Any]:
    root = work / "hook-latency"
    project = root / "project"
    project.mkdir(parents=True)
    # The runtimes hand their hooks their own environment: this one, without Tachograph's
    # or Tracekit's settings, and a place for the hook client's failure log.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TACHOGRAPH_", "TRACEKIT_"))}
    env["TACHOGRAPH_HOOK_LOG"] = str(root / "hook-client" / "hooks.log")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    commands = installed_commands(url, root)
    down_url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    commands["claude_server_down"] = installed_command("claude", down_url, root / "down")
    commands["cat"] = "cat"
    claude_body = payload(PAYLOADS["claude"][0], project, "command")
    contenders = {
        f"tachograph_{runtime}": Contender(
            spawned(commands[runtime], env, project, payload(relative, project, "command")),
            answered_json,
        )
        for runtime, (relative, _) in PAYLOADS.items()
    }
    for runtime in FILE_HOOKS:
        commands[runtime], contenders[f"tachograph_{runtime}"] = file_hook(runtime, url, root, env)
    contenders["claude_server_down"] = Contender(
        spawned(commands["claude_server_down"], env, project, claude_body), failed_open
    )
    contenders["cat"] = Contender(
        spawned("cat", env, project, claude_body),
        lambda i, done: None if done.stdout == claude_body(i) else "cat echoed something else",
    )
    # What of a hook is the interpreter starting, before the client's first line runs.
    commands["python_start"] = f"{shlex.quote(sys.executable)} -S -c pass"
    contenders["python_start"] = Contender(
        spawned(commands["python_start"], env, project, claude_body),
        lambda _, done: None if done.returncode == 0 else f"exit {done.returncode}",
    )
    kit = tracekit(install_tracekit, root, env)
    if isinstance(kit, Tracekit):
        commands["tracekit"] = kit.command
        contenders["tracekit"] = Contender(
            spawned(kit.command, kit.env, project, payload(PAYLOADS["claude"][0], project, "tk")),
            allowed,
        )
    plugins, plugin_described = plugin_hooks(url, root, env, FIXTURES, install=install_tracekit)
    for runtime, plugin in plugins.items():
        contenders[f"plugin_{runtime}"] = Contender(plugin.run, plugin.problem)
    kept_alive = HttpHook(port, payload(CLAUDE_HTTP_BODY, project, "kept"), keep_alive=True)
    contenders["http_keep_alive"] = Contender(kept_alive, HttpHook.problem)
    fresh = HttpHook(port, payload(CLAUDE_HTTP_BODY, project, "fresh"), keep_alive=False)
    contenders["http_new_connection"] = Contender(fresh, HttpHook.problem)
    try:
        with serve(store, port, work / "serve-hook-latency.log"):
            failed = warm(contenders, n)
            if isinstance(kit, Tracekit) and "tracekit" in failed:
                kit = f"its hook failed: {failed.pop('tracekit')}"
                del contenders["tracekit"], commands["tracekit"]
            if failed:
                raise RuntimeError(f"hooks that did not answer as they should: {failed}")
            warm_connections = kept_alive.connections
            series, problems = round_robin(contenders, n)
            series["http_keep_alive"]["new_connections"] = kept_alive.connections - warm_connections
    finally:
        close_all(plugins)
        if isinstance(kit, Tracekit):
            kit.stop_signer()
    shutil.rmtree(root, ignore_errors=True)
    result = figure(n, series, problems, kit, commands)
    # OpenCode's and Kilo's plugin: called in-process, no process spawned per call.
    result["plugin_hooks"] = plugin_figures(series, plugins)
    result["commands"] = {**commands, "plugins": plugin_described}
    if isinstance(kit, Tracekit):
        result["plugin_p50_vs_tracekit"] = {
            runtime: figures["p50_ms"] / series["tracekit"]["p50_ms"]
            for runtime, figures in result["plugin_hooks"].items()
        }
    return result


def figure(
    n: int, series: dict[str, Any], problems: list[str], kit: Tracekit | str, commands: Any
) -> dict[str, Any]:
    command_hooks = {
        runtime: series[f"tachograph_{runtime}"] for runtime in (*PAYLOADS, *FILE_HOOKS)
    }
    if isinstance(kit, Tracekit):
        tracekit_figure = {**series["tracekit"], "version": kit.version}
        baseline = (
            f"Tracekit {kit.version}'s PreToolUse hook as `tracekit init --dev --v2` registers it "
            "(its same-user dev signer on a Unix socket, started by the first hook, default "
            "policy; Bash allowed)"
        )
        vs_tracekit = {
            runtime: figures["p50_ms"] / series["tracekit"]["p50_ms"]
            for runtime, figures in command_hooks.items()
        }
    else:
        tracekit_figure, baseline, vs_tracekit = {"unavailable": kit}, "Tracekit unavailable", {}
    http_p50 = {
        "keep_alive": series["http_keep_alive"]["p50_ms"] / HTTP_TARGET_P50_MS,
        "new_connection": series["http_new_connection"]["p50_ms"] / HTTP_TARGET_P50_MS,
    }
    return {
        "workload": (
            f"{n} calls of each contender in turns, order rotated every round, after "
            f"{WARM_UP} untimed: each runtime's PreToolUse command hook as its installer "
            "writes it, spawned `sh -c '<command>'` with the runtime's captured payload on "
            "stdin (each its own tool call id), stdout read to its end and the exit waited "
            "for (Cline's hook file run `sh <file>`, as Cline runs it), against `tachograph "
            "serve` on SQLite (no key, no handlers); the claude "
            "hook with nothing listening on its URL (fail-open); a bare `cat` hook; the "
            "same interpreter started with `-S -c pass`; "
            f"{baseline}; POST /hooks/claude over a kept-alive connection (as Claude Code "
            "2.1.328 sends its HTTP hooks; a new one where serve closed it idle, counted) "
            "and over a new connection per call"
        ),
        "calls": n,
        "command_hooks": command_hooks,
        "server_down": {"claude": series["claude_server_down"]},
        "cat": series["cat"],
        "python_start": series["python_start"],
        "tracekit": tracekit_figure,
        "http": {
            "keep_alive": series["http_keep_alive"],
            "new_connection": series["http_new_connection"],
        },
        "p50_vs_tracekit": vs_tracekit,
        "http_p50_vs_target": http_p50,
        "targets": {
            "command_p50_vs_tracekit": COMMAND_TARGET_VS_TRACEKIT,
            "http_p50_ms": HTTP_TARGET_P50_MS,
        },
        "problems": problems[:20],
        "commands": commands,
    }
