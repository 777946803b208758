"""Helpers shared by tests: real `tachograph` processes, and watching the projection runner."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

from infra.settings import Settings
from ingest.service import HookIngest
from projections.runner import ProjectionRunner

PG_URL = os.environ.get("TACHOGRAPH_TEST_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/test")


def env_for(settings: Settings) -> dict[str, str]:
    """Environment that makes a child process use the same stores as `settings`."""
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "TACHOGRAPH_DATA_DIR": str(settings.data_dir),
        "TACHOGRAPH_WORKSPACE_ROOT": str(settings.workspace_root),
        # A hook run by the child notes its failures here, never in the user's own log.
        "TACHOGRAPH_HOOK_LOG": str(settings.data_dir / "hooks.log"),
    }
    if settings.database_url is not None:
        env["TACHOGRAPH_DATABASE_URL"] = PG_URL
        env["TACHOGRAPH_DATABASE_SCHEMA"] = settings.database_schema
    if settings.api_key:
        env["TACHOGRAPH_API_KEY"] = settings.api_key
    return env


def run_cli(settings: Settings, *args: str) -> subprocess.CompletedProcess[str]:
    """`tachograph ARGS...` in a child process on the stores of `settings`."""
    return subprocess.run(
        [sys.executable, "-m", "cli.main", *args],
        env=env_for(settings),
        cwd=Path(__file__).resolve().parents[1],
        capture_output=True,
        text=True,
        timeout=120,
    )


def applied_within(runner: ProjectionRunner, position: int, seconds: float) -> bool:
    """Whether the runner applies `position` within `seconds`.

    Watches without waiting on the runner: a waiting reader cuts a commit's linger
    short (ProjectionRunner.commit_linger), which tests of that linger must not do.
    """
    deadline = time.monotonic() + seconds
    while runner.position < position:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Proc:
    """A `tachograph` child process with its output captured to a file."""

    def __init__(self, args: list[str], env: dict[str, str], log: Path) -> None:
        self.log = log
        self._out = log.open("ab")
        self.popen = subprocess.Popen(
            [sys.executable, "-m", "cli.main", *args],
            env=env,
            stdout=self._out,
            stderr=subprocess.STDOUT,
            cwd=Path(__file__).resolve().parents[1],
        )

    def signal(self, sig: int) -> None:
        self.popen.send_signal(sig)

    def wait(self, timeout: float) -> int:
        try:
            return self.popen.wait(timeout)
        finally:
            self._out.close()

    def kill(self) -> None:
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGKILL)
        self.wait(10)

    def output(self) -> str:
        return self.log.read_text(errors="replace")


class Server(Proc):
    """`tachograph serve` on a free loopback port."""

    def __init__(self, settings: Settings, log: Path, extra_env: dict[str, str] | None = None):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        super().__init__(
            ["serve", "--port", str(self.port)], {**env_for(settings), **(extra_env or {})}, log
        )

    def wait_ready(self, timeout: float = 60.0, headers: dict[str, str] | None = None) -> None:
        # Generous: on two cores under a second CPU-heavy load, start-up (imports, schema)
        # and the first health answer each take seconds; a 1 s probe there never succeeds.
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.popen.poll() is not None:
                raise RuntimeError(f"serve exited early:\n{self.output()}")
            probe = max(0.5, min(5.0, deadline - time.monotonic()))
            try:
                health = httpx.get(self.url + "/api/health", timeout=probe, headers=headers)
                if health.status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"serve not ready:\n{self.output()}")


@contextmanager
def admin_client(
    settings: Settings, log: Path, env: dict[str, str], api_key: str
) -> Iterator[httpx.Client]:
    """A `serve` with `env` whose admin key is `api_key`, and a client that sends it."""
    headers = {"x-tachograph-key": api_key}
    server = Server(settings.with_(api_key=api_key), log, env)
    try:
        server.wait_ready(headers=headers)
        with httpx.Client(base_url=server.url, headers=headers, timeout=30) as client:
            yield client
    finally:
        server.kill()


def watch_offloads(ingest: HookIngest) -> list[object]:
    """The blocking steps `ingest` takes off the event loop from now on, as they happen
    (an empty list: a call never left the loop)."""
    offloaded: list[object] = []
    original = ingest.offload

    def watched(step: Any) -> Any:
        offloaded.append(step)
        return original(step)

    ingest.offload = watched
    return offloaded


def live_children(pid: int, subcommand: str) -> list[int]:
    """The live processes `pid` started running `tachograph <subcommand>`."""
    # Each thread lists the children it started (a watcher thread starts replacements).
    pids = [
        int(child)
        for task in Path(f"/proc/{pid}/task").iterdir()
        for child in (task / "children").read_text().split()
    ]
    live = []
    for child in pids:
        try:
            stat = Path(f"/proc/{child}/stat").read_text()
            argv = Path(f"/proc/{child}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if stat.rpartition(")")[2].split()[0] != "Z" and subcommand.encode() in argv:
            live.append(child)
    return live


def gone(pid: int) -> bool:
    """The process has ended (or is a zombie waiting for its parent)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] == "Z"
    except OSError:
        return True


def within(seconds: float, check: Callable[[], bool]) -> bool:
    """`check` came true within `seconds` (polled every 0.1 s)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.1)
    return False
