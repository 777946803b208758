"""SIGTERM and SIGINT for a long-lived process: one flag, however many arrive.

The handler only sets a flag. A handler that sets a `threading.Event` can run while
the same thread holds that Event's lock (inside `set()` for an earlier signal, or as a
timed `wait()` ends) and then waits on it forever: that left projections children
behind their serve. Once the process is stopping, further signals are ignored: the
interpreter restores the default action of a Python handler as it exits, and a late
signal would otherwise kill what is left of the shutdown (exit -2 or -15).
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable

SIGNALS = (signal.SIGTERM, signal.SIGINT)


def ignore_further() -> None:
    """Stopping already: later SIGTERMs and SIGINTs change nothing."""
    for sig in SIGNALS:
        signal.signal(sig, signal.SIG_IGN)


class StopSignals:
    """Installs the handlers; `stopping` once one arrived or `stop()` was called."""

    def __init__(self) -> None:
        self.stopping = False
        for sig in SIGNALS:
            signal.signal(sig, self.stop)

    def stop(self, *_: object) -> None:
        self.stopping = True

    def wait(self, every_s: float = 0.5, tick: Callable[[], None] | None = None) -> None:
        """Return once stopping (within 50 ms), calling `tick` every `every_s` meanwhile;
        further signals are ignored from then on."""
        checked = time.monotonic()
        while not self.stopping:
            time.sleep(0.05)
            if tick is not None and time.monotonic() - checked >= every_s:
                checked = time.monotonic()
                tick()
        ignore_further()
