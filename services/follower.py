"""A daemon thread that keeps an in-memory copy current with other processes' changes.

Each process holds snapshots the hot paths answer from (learned content, the active
policies); a change another replica made reaches this one through the read model, at
most `interval_s` later.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

log = logging.getLogger(__name__)


class Follower:
    """Every `interval_s`, `refresh()` when `changed()` says the read model moved on."""

    def __init__(
        self, name: str, interval_s: float, changed: Callable[[], bool], refresh: Callable[[], None]
    ) -> None:
        self.name = name
        self.interval_s = interval_s
        self._changed = changed
        self._refresh = refresh
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._follow, name=self.name, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def _follow(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                if self._changed():
                    self._refresh()
            except Exception as exc:  # noqa: BLE001 - keep the last snapshot through a blip
                log.warning("could not refresh %s: %s", self.name, exc)
