"""The servers a benchmark measures: a fresh store for each, `serve` and the bare
baselines as processes that are up when yielded and stopped afterwards."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Store:
    """A fresh, empty store for one measurement: a temp dir, or a new PostgreSQL schema."""

    def __init__(self, kind: str, pg_url: str, root: Path) -> None:
        self.kind = kind
        self.pg_url = pg_url
        self.root = root
        self.schema = f"bench_{uuid.uuid4().hex[:10]}"

    def env(self) -> dict[str, str]:
        (self.root / "workspace").mkdir(parents=True, exist_ok=True)
        env = {
            "TACHOGRAPH_DATA_DIR": str(self.root / "data"),
            "TACHOGRAPH_WORKSPACE_ROOT": str(self.root / "workspace"),
        }
        if self.kind == "postgres":
            env["TACHOGRAPH_DATABASE_URL"] = self.pg_url
            env["TACHOGRAPH_DATABASE_SCHEMA"] = self.schema
        return env

    def drop(self) -> None:
        if self.kind == "postgres":
            import psycopg

            with psycopg.connect(self.pg_url, autocommit=True) as conn:
                conn.execute(f'DROP SCHEMA IF EXISTS "{self.schema}" CASCADE')


@contextmanager
def process(
    argv: list[str], env: dict[str, str], url: str, log: Path
) -> Iterator[subprocess.Popen[bytes]]:
    """Start a server process, wait until `url` answers, stop it afterwards."""
    with log.open("ab") as out:
        proc = subprocess.Popen(
            argv, env={**os.environ, **env}, stdout=out, stderr=subprocess.STDOUT
        )
        try:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                if proc.poll() is not None:
                    raise RuntimeError(f"{argv[2:4]} exited: see {log}")
                try:
                    httpx.get(url, timeout=1)
                    break
                except httpx.HTTPError:
                    time.sleep(0.1)
            yield proc
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def serve(store: Store, port: int, log: Path, extra: dict[str, str] | None = None) -> Any:
    argv = [sys.executable, "-m", "cli.main", "serve", "--port", str(port)]
    return process(
        argv, {**store.env(), **(extra or {})}, f"http://127.0.0.1:{port}/api/health", log
    )


def baseline(app: str, port: int, env: dict[str, str], log: Path) -> Any:
    argv = [
        sys.executable,
        "-m",
        "uvicorn",
        f"bench.baselines:{app}",
        "--factory",
        "--port",
        str(port),
        "--log-level",
        "warning",
        "--no-access-log",
    ]
    return process(argv, env, f"http://127.0.0.1:{port}/docs", log)
