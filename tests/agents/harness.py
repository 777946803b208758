"""What the real-CLI tests (test_codex.py, test_gemini_cli.py, test_copilot_cli.py) and
their drivers (codex_run.py, gemini_run.py, copilot_driver.py) share.

A test runs its driver inside a loopback-only network namespace (`run_driver`), so that
no CLI can reach anything but 127.0.0.1. There the driver starts the managed hook
handlers (`ManagedHooks`), `tachograph serve` on SQLite (`start_serve`), installs the
hooks with `tachograph hook install`, runs the CLI against its model stand-in
(`run_agent`) and writes what it saw to WORK/report.json (`write_report`). The test then
reads what serve stored (`stored`, `verify`). A run's folder WORK holds `home/` and
`project/` (the CLI's), `data/` and `workspace/` (serve's), `hook-client/` (the command
hook's data dir: its `hooks.log` of failed deliveries) and `serve.log`.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from infra.settings import Settings
from tests.hook_server import Behaviour, HookServer, answer
from tests.support import Server, env_for, free_port

if TYPE_CHECKING:
    from fastapi.testclient import TestClient

REPO = Path(__file__).resolve().parents[2]
# The handler ids of the managed hooks every run configures (the audit names them).
POLICY = "shell-policy"
CONTEXT_HANDLERS = {
    "SessionStart": "session-context",
    "UserPromptSubmit": "prompt-context",
    "PostToolUse": "tool-context",
}


# Inside the namespace: the drivers


def command_of(body: dict[str, Any]) -> str:
    """The shell command a managed PreToolUse handler is asked about ("" for other tools)."""
    tool_input = body.get("detail", {}).get("toolInput")
    command = tool_input.get("command") if isinstance(tool_input, dict) else None
    return command if isinstance(command, str) else ""


def shell_policy(
    *, deny: str, reason: str, original: str, replacement: dict[str, Any]
) -> Behaviour:
    """The managed PreToolUse handler: deny a command holding `deny`, and replace the input
    of the command `original` with `replacement` (a complete input)."""

    def decide(body: dict[str, Any]) -> tuple[int, Any]:
        command = command_of(body)
        if deny in command:
            return 200, {"schemaVersion": 1, "outcome": "deny", "reason": reason}
        if command == original:
            return 200, {"schemaVersion": 1, "outcome": "modify", "replacement": replacement}
        return 200, {"schemaVersion": 1, "outcome": "pass"}

    return decide


class ManagedHooks:
    """The run's managed handlers (TACHOGRAPH_HOOKS), served on loopback by one HookServer:
    the shell policy, and a handler per event in `contexts` that passes with that text as
    additionalContext."""

    def __init__(
        self,
        policy: Behaviour,
        *,
        matcher: Sequence[str] | None = None,
        contexts: Mapping[str, str] | None = None,
    ) -> None:
        self.server = HookServer()
        self.hooks: dict[str, list[dict[str, Any]]] = {}
        for event, text in (contexts or {}).items():
            self._add(event, CONTEXT_HANDLERS[event], answer("pass", additionalContext=text))
        self._add("PreToolUse", POLICY, policy, matcher)

    def _add(
        self,
        event: str,
        handler_id: str,
        behaviour: Behaviour,
        matcher: Sequence[str] | None = None,
    ) -> None:
        self.server.routes[f"/{handler_id}"] = behaviour
        entry: dict[str, Any] = {"id": handler_id, "type": "http"}
        entry["url"] = f"{self.server.url}/{handler_id}"
        if matcher is not None:
            entry["matcher"] = list(matcher)
        self.hooks.setdefault(event, []).append(entry)

    def replace(self, handler_id: str, behaviour: Behaviour) -> None:
        self.server.routes[f"/{handler_id}"] = behaviour

    def env(self) -> dict[str, str]:
        return {
            "TACHOGRAPH_HOOKS": json.dumps({"version": 1, "hooks": self.hooks}),
            "TACHOGRAPH_HOOK_ALLOW_INSECURE_LOOPBACK": "1",
        }

    def policy_inputs(self) -> list[Any]:
        """The tool input of each call the policy was asked about, in order."""
        return [b.get("detail", {}).get("toolInput") for b in self.server.bodies(f"/{POLICY}")]

    def close(self) -> None:
        self.server.close()


def settings_of(work: Path, api_key: str | None = None) -> Settings:
    return Settings(data_dir=work / "data", workspace_root=work / "workspace", api_key=api_key)


def start_serve(
    work: Path,
    managed: ManagedHooks,
    *,
    api_key: str | None = None,
    extra_env: Mapping[str, str] | None = None,
) -> Server:
    """`tachograph serve` on SQLite in WORK/data on a free loopback port, once it answers."""
    (work / "workspace").mkdir(parents=True, exist_ok=True)
    env = {**managed.env(), **(extra_env or {})}
    serve = Server(settings_of(work, api_key), work / "serve.log", env)
    serve.wait_ready(headers={"x-tachograph-key": api_key} if api_key else None)
    return serve


def driver_args(cli: str) -> tuple[argparse.Namespace, Path, Path]:
    """A driver's arguments (`--work DIR --<cli> BIN [--server-down] [--fail-closed]`),
    and the run's HOME and project folders under DIR (the project made)."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument(f"--{cli}", required=True)
    parser.add_argument("--server-down", action="store_true")
    parser.add_argument("--fail-closed", action="store_true")
    args = parser.parse_args()
    (args.work / "project").mkdir(parents=True, exist_ok=True)
    return args, args.work / "home", args.work / "project"


@contextmanager
def serving(
    work: Path,
    managed: ManagedHooks,
    *,
    down: bool,
    extra_env: Mapping[str, str] | None = None,
) -> Iterator[str]:
    """The URL hooks are pinned to: a started serve's, or (`down`) a port nothing answers
    on. Serve is stopped and the managed handlers closed afterwards."""
    serve = None if down else start_serve(work, managed, extra_env=extra_env)
    try:
        yield serve.url if serve else f"http://127.0.0.1:{free_port()}"
    finally:
        if serve is not None:
            stop_serve(serve)
        managed.close()


def wait_for_any_event(url: str, events: Sequence[str], seconds: float) -> bool:
    """Until serve has recorded one of `events` in some session (a runtime that delivers
    its last hooks detached may exit before they arrive); whether one came."""
    import httpx

    deadline = time.monotonic() + seconds
    with httpx.Client(base_url=url, timeout=5) as client:
        while time.monotonic() < deadline:
            for session in client.get("/api/sessions").json()["items"]:
                audit = client.get(f"/api/sessions/{session['id']}/hooks").json()["items"]
                if any(record["event"] in events for record in audit):
                    return True
            time.sleep(0.2)
    return False


def stop_serve(serve: Server) -> None:
    """Stop it as an operator would (SIGTERM), which lets it answer what it is answering."""
    if serve.popen.poll() is None:
        serve.signal(signal.SIGTERM)
    serve.wait(20)


def wait_closed(port: int, seconds: float = 20) -> None:
    """Until nothing accepts connections on the port any more."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), 0.5).close()
        except OSError:
            return
        time.sleep(0.05)
    raise TimeoutError(f"127.0.0.1:{port} still accepts connections")


def tachograph(*args: str, env: Mapping[str, str]) -> str:
    """Run the `tachograph` CLI of this checkout; its output, after it succeeded."""
    done = subprocess.run(
        [sys.executable, "-m", "cli.main", *args],
        env=dict(env),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"tachograph {' '.join(args)}: {done.returncode}\n{done.stderr}")
    return done.stdout


def agent_token(work: Path, api_key: str | None = None) -> str:
    """An agent token for workspace `default`, issued by `tachograph keys issue` into the
    run's data (WORK/workspace made for serve)."""
    (work / "workspace").mkdir(parents=True, exist_ok=True)
    issue = ["keys", "issue", "--role", "agent", "--workspace", "default"]
    return tachograph(*issue, env=env_for(settings_of(work, api_key))).strip()


def install_hooks(runtime: str, home: Path, url: str, *flags: str) -> None:
    """`tachograph hook install <runtime> <home>`, pinned to the server at `url`."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    tachograph("hook", "install", runtime, str(home), "--url", url, *flags, env=env)


def agent_env(work: Path, **extra: str) -> dict[str, str]:
    """What every CLI gets: a PATH, a HOME of its own, no colours, and the hook client's
    failure log (the run's own)."""
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(work / "home"),
        "NO_COLOR": "1",
        "TACHOGRAPH_HOOK_LOG": str(work / "hook-client" / "hooks.log"),
        **extra,
    }


def run_agent(
    argv: Sequence[str],
    *,
    env: Mapping[str, str],
    cwd: Path,
    timeout: float = 120,
    stderr_file: Path | None = None,
) -> dict[str, Any]:
    """Run the CLI to its end (stdin closed: some wait for it otherwise); its whole stderr
    also into `stderr_file`, if named (the report keeps its end only)."""
    started = time.monotonic()
    done = subprocess.run(
        list(argv),
        env=dict(env),
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if stderr_file is not None:
        stderr_file.write_text(done.stderr)
    return {
        "seconds": time.monotonic() - started,
        "exit": done.returncode,
        "stdout": done.stdout[-4000:],
        "stderr": done.stderr[-4000:],
    }


def run_against(
    api: Any,
    argv: Sequence[str],
    *,
    env: Mapping[str, str],
    cwd: Path,
    stderr_file: Path | None = None,
) -> dict[str, Any]:
    """run_agent, with what the model stand-in `api` received and the script's errors."""
    report = run_agent(argv, env=env, cwd=cwd, stderr_file=stderr_file)
    requests = [json.dumps(r.body) for r in api.agent_requests()]
    report.update(model_requests=requests, standin_errors=list(api.errors))
    return report


def files_in(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def write_run_report(
    work: Path, report: dict[str, Any], managed: ManagedHooks, project: Path, url: str
) -> None:
    """WORK/report.json of a run: the CLI's report, the project's files, the policy's
    calls and the server URL the hooks were pinned to."""
    report.update(files=files_in(project), policy_calls=managed.policy_inputs(), serve_url=url)
    write_report(work, report)


def write_report(work: Path, report: Mapping[str, Any]) -> None:
    """WORK/report.json, with the network namespace it was made in."""
    namespaced = {"netns": os.readlink("/proc/self/ns/net"), **report}
    (work / "report.json").write_text(json.dumps(namespaced, indent=1))


# In the test process (pytest and the app imported where used: the drivers need neither)


def agent_cli(name: str) -> str:
    """The pinned CLI, installed (or found cached) by scripts/agent-clis: never skipped."""
    import pytest

    try:
        done = subprocess.run(
            [str(REPO / "scripts" / "agent-clis"), name],
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"scripts/agent-clis {name} did not finish within 10 min")
    if done.returncode != 0:
        pytest.fail(f"scripts/agent-clis {name} failed ({done.returncode}):\n{done.stderr}")
    binary = done.stdout.strip().splitlines()[-1]
    if not Path(binary).exists():
        pytest.fail(f"scripts/agent-clis gave {binary!r}, which does not exist")
    return binary


def run_driver(driver: Path, work: Path, *args: str, timeout: float = 240) -> dict[str, Any]:
    """Run a driver inside `unshare -n` with loopback up; its report.json."""
    import pytest

    if subprocess.run(["unshare", "-n", "true"], capture_output=True).returncode != 0:
        pytest.fail("`unshare -n` does not work here: the real-CLI tests run only offline")
    work.mkdir(parents=True, exist_ok=True)
    inner = [sys.executable, str(driver), "--work", str(work), *args]
    done = subprocess.run(
        ["unshare", "-n", "sh", "-c", 'ip link set lo up && exec "$@"', "sh", *inner],
        cwd=REPO,
        env=dict(os.environ),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    serve_log = work / "serve.log"
    log = serve_log.read_text(errors="replace")[-3000:] if serve_log.exists() else ""
    assert done.returncode == 0, (done.stdout[-3000:], done.stderr[-3000:], log)
    report: dict[str, Any] = json.loads((work / "report.json").read_text())
    assert report["netns"] != os.readlink("/proc/self/ns/net")  # nothing left the machine
    return report


@contextmanager
def stored(work: Path, api_key: str | None = None) -> Iterator[TestClient]:
    """The app over what serve stored in WORK/data."""
    from fastapi.testclient import TestClient

    from api.app import create_app

    headers = {"x-tachograph-key": api_key} if api_key else None
    with TestClient(create_app(settings_of(work, api_key)), headers=headers) as client:
        yield client


def verify(work: Path, api_key: str | None = None) -> None:
    """`tachograph verify` of the run's log: its chain holds."""
    tachograph("verify", env=env_for(settings_of(work, api_key)))


def hook_failures(work: Path) -> list[str]:
    """The events whose command hook could not reach Tachograph, in order (a line marking a
    delivery that got through again names no event)."""
    log = work / "hook-client" / "hooks.log"
    entries = [json.loads(line) for line in log.read_text().splitlines()]
    return [entry["event"] for entry in entries if not entry.get("ok")]
