"""The OTLP receiver in a process of its own, started by `serve` when
TACHOGRAPH_OTLP_PORT is set (docs/usage.md, "The receiver's own port").

A fleet's exporters post thousands of small exports a second; on the main port each
costs the event loop, the interpreter lock and the core the hooks' answers need. Here
they cost a second process: it authenticates, decodes, maps and appends to the same
log through its own group commit, and the main process only reads what was appended
(its projections follow the log, as they follow another replica's appends).

The child is given its settings through a pipe, never its environment, and without
the secrets it has no use for (the log signing key, the Coder hook secret, hook
handlers' secrets): it holds the database URL and the admin key, which it needs to
append and to check credentials. It ends with `serve` (SIGTERM from the kernel if
`serve` dies without stopping it) and `serve` starts it again if it ends alone.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from typing import TYPE_CHECKING, Any

from cli.child_process import (
    RESTART_S,
    STARTUP_S,
    begin_child,
    pinned_cpu,
    send_settings,
    stop_child,
)

if TYPE_CHECKING:
    from infra.settings import Settings

log = logging.getLogger("tachograph.otlp_receiver")


def receiver_settings(settings: Settings) -> Settings:
    """What the receiver's process is given: the secrets it never uses are left out."""
    return dataclasses.replace(
        settings,
        log_signing_key=None,
        coder_hook_secret=None,
        secrets={},
        otlp_port=None,
        sqlite_writer_turns=True,  # it appends beside serve
    )


class ReceiverProcess:
    """`serve`'s handle on its receiver: start it, keep it running, stop it."""

    def __init__(self, settings: Settings, host: str, port: int) -> None:
        self.settings = settings
        self.host = host
        self.port = port
        self.url = f"http://{_probe_host(host)}:{port}"
        self._proc: subprocess.Popen[bytes] | None = None
        self._stopping = threading.Event()
        self._watcher: threading.Thread | None = None
        # A stop and the watcher's restart never cross: no receiver is started after stop.
        self._lock = threading.Lock()

    def start(self) -> None:
        """Start the receiver and wait until it answers; RuntimeError if it cannot."""
        import httpx

        self._spawn()
        deadline = time.monotonic() + STARTUP_S
        while time.monotonic() < deadline:
            assert self._proc is not None
            if self._proc.poll() is not None:
                raise RuntimeError(
                    f"TACHOGRAPH_OTLP_PORT: the OTLP receiver could not start on "
                    f"{self.host}:{self.port} (exit status {self._proc.returncode}; its "
                    "reason is logged above)"
                )
            try:
                # Loopback only, whatever proxy the environment names.
                httpx.get(f"{self.url}/health", timeout=1, trust_env=False).raise_for_status()
                break
            except httpx.HTTPError:
                time.sleep(0.1)
        else:
            self.stop()
            raise RuntimeError(f"TACHOGRAPH_OTLP_PORT: no answer from {self.url} in time")
        log.info("OTLP receiver on %s:%d (pid %d)", self.host, self.port, self._proc.pid)
        self._watcher = threading.Thread(target=self._watch, name="otlp-receiver", daemon=True)
        self._watcher.start()

    def stop(self) -> None:
        with self._lock:
            self._stopping.set()
            proc = self._proc
        stop_child(proc)

    def _spawn(self) -> None:
        with self._lock:
            if not self._stopping.is_set():
                self._proc = self._started()

    def _started(self) -> subprocess.Popen[bytes]:
        argv = [sys.executable, "-m", "cli.main", "otlp-receiver"]
        argv += ["--host", self.host, "--port", str(self.port), "--parent", str(os.getpid())]
        pinned = pinned_cpu()
        if pinned is not None:
            argv += ["--avoid-cpu", str(pinned)]
        # Its own session: a terminal's Ctrl-C reaches serve, which stops it in order.
        proc = subprocess.Popen(argv, stdin=subprocess.PIPE, start_new_session=True)
        assert proc.stdin is not None
        with proc.stdin:
            send_settings(proc.stdin, receiver_settings(self.settings))
        return proc

    def _watch(self) -> None:
        delay, cap = RESTART_S
        while not self._stopping.is_set():
            proc = self._proc
            assert proc is not None
            status = proc.wait()
            if self._stopping.is_set():
                return
            log.warning("OTLP receiver ended (exit status %s); starting it again", status)
            if self._stopping.wait(delay):
                return
            delay = min(delay * 2, cap)
            self._spawn()


def _probe_host(host: str) -> str:
    """Where serve asks the receiver whether it is up: loopback for a wildcard address."""
    if host in ("", "0.0.0.0", "::"):
        return "127.0.0.1"
    return f"[{host}]" if ":" in host else host


# --- the receiver's own process -------------------------------------------------------


def run_receiver(args: argparse.Namespace) -> int:
    """`tachograph otlp-receiver`: what `serve` starts; its settings arrive on stdin."""
    from api.app import create_receiver_app
    from bootstrap import freeze_startup_heap
    from cli.http_serve import run_http

    settings = begin_child(
        args.parent,
        args.avoid_cpu,
        "tachograph otlp-receiver: started by `tachograph serve` when TACHOGRAPH_OTLP_PORT "
        "is set, which hands it its settings on stdin; set that instead",
    )
    if settings is None:
        return 2
    app = create_receiver_app(settings)
    freeze_startup_heap()  # long-lived as serve is (bootstrap.py)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: None)  # uvicorn's own handler ends it cleanly
    run_http(app, args.host, args.port, settings)
    return 0


def add_parser(sub: Any) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = sub.add_parser(
        "otlp-receiver",
        help="the OTLP receiver alone (serve starts it when TACHOGRAPH_OTLP_PORT is set)",
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--avoid-cpu", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--parent", type=int, default=None, help=argparse.SUPPRESS)
    parser.set_defaults(func=run_receiver)
    return parser
