"""What `serve`'s helper processes (the OTLP receiver, the projections) share: their
settings come on a pipe, never in their environment; they end when `serve` ends; and
when `serve` is pinned to a CPU they run on another one."""

from __future__ import annotations

import ctypes
import os
import pickle
import signal
import struct
import subprocess
from typing import IO, TYPE_CHECKING, Final

if TYPE_CHECKING:
    from infra.settings import Settings

# How long serve waits for a helper to start and to stop; one that ends alone is
# started again after RESTART_S[0], the wait doubling up to RESTART_S[1].
STARTUP_S: Final = 60.0
STOP_S: Final = 15.0
RESTART_S: Final = (1.0, 30.0)
_PR_SET_PDEATHSIG: Final = 1
_LENGTH: Final = struct.Struct(">Q")


def send_settings(stream: IO[bytes], settings: Settings) -> None:
    """Write the settings a child reads with `settings_from_parent` (length first, so the
    pipe can go on carrying other bytes after them)."""
    data = pickle.dumps(settings)
    stream.write(_LENGTH.pack(len(data)) + data)
    stream.flush()


def settings_from_parent(stream: IO[bytes] | None) -> Settings | None:
    """The settings serve wrote with `send_settings`; None when nothing like them arrives
    (a terminal, or anything else on the pipe)."""
    from infra.settings import Settings

    if stream is None or stream.isatty():
        return None
    try:
        (size,) = _LENGTH.unpack(_read_exactly(stream, _LENGTH.size))
        settings = pickle.loads(_read_exactly(stream, size))  # noqa: S301 - serve wrote them
    except Exception:  # noqa: BLE001 - anything but serve's settings is refused alike
        return None
    return settings if isinstance(settings, Settings) else None


def _read_exactly(stream: IO[bytes], size: int) -> bytes:
    if size > 64 * 1024 * 1024:
        raise ValueError("not settings")
    data = stream.read(size)
    if data is None or len(data) != size:
        raise ValueError("cut short")
    return data


def begin_child(parent: int | None, avoid_cpu: int | None, refusal: str) -> Settings | None:
    """A helper's first steps: end with serve, read serve's settings, log as serve does,
    and keep off serve's CPU. None (after printing `refusal`) when not started by serve."""
    import sys

    from infra.logs import configure_logging

    end_with_parent(parent)
    settings = settings_from_parent(sys.stdin.buffer if sys.stdin else None)
    if settings is None:
        print(refusal, file=sys.stderr)
        return None
    configure_logging(settings.log_level, settings.secret_values())
    away_from(avoid_cpu)
    return settings


def end_with_parent(parent: int | None) -> None:
    """SIGTERM when `serve` ends, however it ends (Linux; elsewhere serve stops it)."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):
        return
    if parent is not None and os.getppid() != parent:  # serve ended before the request took
        os.kill(os.getpid(), signal.SIGTERM)


def pinned_cpu() -> int | None:
    """The one CPU serve keeps its threads on, if it is pinned (infra/cpu_affinity.py)."""
    from infra.cpu_affinity import allowed_cpus

    cpus = allowed_cpus()
    return next(iter(cpus)) if cpus is not None and len(cpus) == 1 else None


def away_from(cpu: int | None) -> None:
    """Run on another CPU than serve's, when serve is pinned and there is another."""
    from infra.cpu_affinity import allowed_cpus, pin_to

    allowed = allowed_cpus()
    if cpu is None or allowed is None or len(allowed - {cpu}) == 0:
        return
    pin_to(min(allowed - {cpu}))


def stop_child(proc: subprocess.Popen[bytes] | None) -> None:
    """SIGTERM, then SIGKILL if it has not ended within STOP_S."""
    if proc is None or proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(STOP_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
