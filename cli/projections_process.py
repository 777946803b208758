"""The projections in a process of their own, started by `serve` (TACHOGRAPH_PROJECTIONS,
docs/design.md, "Two processes, one log").

Applying the log to the read models is about a fifth of the interpreter time an event
costs; in serve's process it takes the interpreter lock the requests need, while a
second core stays idle. Here it runs beside serve: the child follows the log as any
replica's runner does (the read models and their tracked positions are in the store
both processes open) and tells serve, on a pipe, each position it has committed, and
which in-memory copies (learned content, active policies) a batch changed. serve's
runner object stays the one every waiter uses: `position` and `wait_for` go by what the
child reports, and a commit or a waiting reader wakes the child with one byte.

The child gets its settings on its standard input, never in its environment, without
the secrets it has no use for (the admin key, the Coder hook secret, handlers' secrets,
the decision exporter's settings); it keeps the log signing key, because it signs the
chain's checkpoints. It ends with `serve` (SIGTERM from the kernel if `serve` dies
without stopping it), and `serve` starts it again if it ends alone.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import fcntl
import json
import logging
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import IO, TYPE_CHECKING, Any, Final

from cli.child_process import (
    RESTART_S,
    STARTUP_S,
    STOP_S,
    begin_child,
    pinned_cpu,
    send_settings,
    stop_child,
)
from cli.stop_signals import StopSignals

if TYPE_CHECKING:
    from infra.settings import Settings
    from projections.runner import ProjectionRunner

log = logging.getLogger("tachograph.projections_process")

WAKE: Final = b"w"
HURRY: Final = b"h"


def projections_settings(settings: Settings) -> Settings:
    """What the projections' process is given: the secrets it never uses are left out."""
    return dataclasses.replace(
        settings,
        api_key=None,
        coder_hook_secret=None,
        secrets={},
        otlp_port=None,
        decision_export=None,
    )


class ProjectionsProcess:
    """serve's handle on the process applying its log (the runner's `Elsewhere`)."""

    def __init__(self, settings: Settings, runner: ProjectionRunner) -> None:
        self.settings = settings
        self.runner = runner
        self._proc: subprocess.Popen[bytes] | None = None
        self._reports: IO[bytes] | None = None
        self._wake_fd: int | None = None
        # Wakes, a restart's swap of the pipe and stop never cross: a wake never writes
        # to a descriptor number the process has since reused.
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._ready = threading.Event()
        self._follower: threading.Thread | None = None

    def start(self) -> None:
        """Start the child and wait for its first report; RuntimeError if it cannot."""
        self._spawn()
        self._follower = threading.Thread(
            target=self._follow, name="projections-process", daemon=True
        )
        self._follower.start()
        first = self._proc
        assert first is not None
        deadline = time.monotonic() + STARTUP_S
        while not self._ready.wait(0.1):
            if first.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(
                    "TACHOGRAPH_PROJECTIONS: the projections process did not start "
                    f"(exit status {first.poll()}; its reason is logged above); "
                    "TACHOGRAPH_PROJECTIONS=thread applies them in serve's own process"
                )
        assert self._proc is not None
        log.info("projections applied in their own process (pid %d)", self._proc.pid)

    def stop(self) -> None:
        with self._lock:
            self._stopping.set()
            proc = self._proc
            self._close_wake()
        stop_child(proc)
        if self._follower is not None and self._follower is not threading.current_thread():
            self._follower.join(STOP_S)

    def wake(self, hurry: bool) -> None:
        with self._lock:
            if self._wake_fd is None:
                return
            # A full pipe holds wakes enough; a broken one, a child that is ending.
            with contextlib.suppress(BlockingIOError, BrokenPipeError):
                os.write(self._wake_fd, HURRY if hurry else WAKE)

    def _spawn(self) -> None:
        read_end, write_end = os.pipe()
        argv = [sys.executable, "-m", "cli.main", "projections", "--report-fd", str(write_end)]
        argv += ["--parent", str(os.getpid())]
        pinned = pinned_cpu()
        if pinned is not None:
            argv += ["--avoid-cpu", str(pinned)]
        with self._lock:
            if self._stopping.is_set():
                os.close(read_end)
                os.close(write_end)
                return
            # Its own session: a terminal's Ctrl-C reaches serve, which stops it in order.
            proc = subprocess.Popen(
                argv, stdin=subprocess.PIPE, pass_fds=(write_end,), start_new_session=True
            )
            os.close(write_end)
            assert proc.stdin is not None
            send_settings(proc.stdin, projections_settings(self.settings))
            wake_fd = os.dup(proc.stdin.fileno())
            proc.stdin.close()
            flags = fcntl.fcntl(wake_fd, fcntl.F_GETFL)
            fcntl.fcntl(wake_fd, fcntl.F_SETFL, flags | os.O_NONBLOCK)
            self._close_wake()
            self._proc, self._wake_fd = proc, wake_fd
            self._reports = os.fdopen(read_end, "rb")

    def _close_wake(self) -> None:
        if self._wake_fd is not None:
            os.close(self._wake_fd)
            self._wake_fd = None

    def _follow(self) -> None:
        """Bring the child's reports to the runner; start it again if it ends alone."""
        delay, cap = RESTART_S
        while True:
            reports, proc = self._reports, self._proc
            if reports is None or proc is None:
                return
            with reports:
                for line in reports:
                    self._apply(line)
                    delay = RESTART_S[0]
            status = proc.wait()
            if self._stopping.is_set():
                return
            self.runner.report(
                self.runner.position,
                f"the projections process ended (exit status {status}); starting it again",
            )
            log.warning("projections process ended (exit status %s); starting it again", status)
            if self._stopping.wait(delay):
                return
            delay = min(delay * 2, cap)
            self._spawn()

    def _apply(self, line: bytes) -> None:
        report = json.loads(line)
        changed = set(report["changed"])
        if changed:
            self._reload(changed)
        self.runner.report(int(report["position"]), report["error"])
        self._ready.set()

    def _reload(self, names: set[str]) -> None:
        """Bring this process's in-memory copies of changed read models up to date before
        the position that changed them counts as reached."""
        from projections.base import ListenedProjection

        for projection in self.runner.projections:
            if projection.name not in names or not isinstance(projection, ListenedProjection):
                continue
            if projection.on_change is not None:
                with self.runner.store.transaction(write=False) as cur:
                    projection.on_change(cur)


# --- the projections' own process ------------------------------------------------------


def run_projections(args: argparse.Namespace) -> int:
    """`tachograph projections`: what `serve` starts; its settings arrive on stdin."""
    from bootstrap import build_runner, freeze_startup_heap
    from projections.base import ListenedProjection

    refusal = (
        "tachograph projections: started by `tachograph serve`, which hands it its "
        "settings on stdin and a pipe for its reports; run serve (or `tachograph worker`) "
        "instead"
    )
    if args.report_fd is None:  # settings alone would be applied with nobody told
        print(refusal, file=sys.stderr)
        return 2
    settings = begin_child(args.parent, args.avoid_cpu, refusal)
    if settings is None:
        return 2
    runner = build_runner(settings)
    # As long-lived as serve: its start-up heap is frozen and young collections are rare
    # (bootstrap.py). It shares serve's cores, so its collector's time was serve's too:
    # ingest 1.03x in six alternated pairs (docs/performance.md).
    freeze_startup_heap()
    reports = os.fdopen(args.report_fd, "wb", buffering=0)
    changed: set[str] = set()
    sending = threading.Lock()
    sent: list[str | None] = [None]

    def send(position: int) -> None:
        with sending:
            names = sorted(changed)
            changed.clear()
            sent[0] = runner.last_error
            line = {"position": position, "error": sent[0], "changed": names}
            reports.write(json.dumps(line).encode() + b"\n")

    for projection in runner.projections:
        if isinstance(projection, ListenedProjection):
            projection.on_change = lambda _cur, name=projection.name: changed.add(name)
    signals = StopSignals()
    runner.on_advance = send
    runner.start()
    send(runner.position)  # ready, even on an empty log
    threading.Thread(target=_wakes, args=(runner, signals.stop), name="wakes", daemon=True).start()

    def report_errors() -> None:
        if runner.last_error != sent[0]:
            send(runner.position)

    with contextlib.suppress(BrokenPipeError):  # serve is gone
        signals.wait(tick=report_errors)
    runner.stop()
    return 0


def _wakes(runner: Any, stop: Callable[[], None]) -> None:
    """serve's wake-ups on stdin; its end (serve closed it or died) ends this process."""
    while True:
        data = os.read(sys.stdin.fileno(), 4096)
        if not data:
            stop()
            return
        if HURRY in data:
            runner.hurry()
        else:
            runner.wake()


def add_parser(sub: Any) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = sub.add_parser(
        "projections",
        help="the projections alone, applying serve's log (serve starts it)",
    )
    parser.add_argument("--report-fd", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--avoid-cpu", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--parent", type=int, default=None, help=argparse.SUPPRESS)
    parser.set_defaults(func=run_projections)
    return parser
