"""Each session's and workspace's usage, in memory, for the hook hot path (budgets).

`for_call` answers from memory: never a database read on the caller's thread. A
follower thread reads the rows the usage read model gained since it last looked (by
log position) every `interval_s` and adds them in; at a new UTC day it reads that day's
rows again. The figures therefore lag the log by the projection's lag (milliseconds
when serve is not overloaded) plus at most `interval_s` (1 s by default).
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from projections.store import ReadStore

log = logging.getLogger(__name__)
REFRESH_INTERVAL_S = 1.0
_FIGURES = ("requests", "inputTokens", "outputTokens", "cacheReadTokens",
            "cacheCreationTokens", "costUsd")  # fmt: skip


@dataclass(slots=True)
class Totals:
    requests: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_creation_tokens: int = 0
    cost_usd: float = 0.0

    def add(self, row: dict[str, Any]) -> None:
        self.requests += int(row.get("requests") or 1)
        self.input_tokens += int(row["input_tokens"] or 0)
        self.output_tokens += int(row["output_tokens"] or 0)
        self.cache_read_tokens += int(row["cache_read_tokens"] or 0)
        self.cache_creation_tokens += int(row["cache_creation_tokens"] or 0)
        self.cost_usd += float(row["cost_usd"] or 0.0)

    def wire(self) -> dict[str, Any]:
        return {
            "requests": self.requests,
            "inputTokens": self.input_tokens,
            "outputTokens": self.output_tokens,
            "cacheReadTokens": self.cache_read_tokens,
            "cacheCreationTokens": self.cache_creation_tokens,
            "costUsd": round(self.cost_usd, 9),
        }


@dataclass(slots=True)
class _State:
    position: int = 0
    day: str = ""
    session: dict[str, Totals] = field(default_factory=dict)
    session_today: dict[str, Totals] = field(default_factory=dict)
    workspace: dict[str, Totals] = field(default_factory=dict)
    workspace_today: dict[str, Totals] = field(default_factory=dict)


def _today() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%d")


class UsageFigures:
    """The read port budgets use: `for_call(session_id, workspace)`."""

    def __init__(self, store: ReadStore, interval_s: float = REFRESH_INTERVAL_S) -> None:
        self.store = store
        self.interval_s = interval_s
        self._state = _State()
        self._lock = threading.Lock()  # one refresh at a time
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.refreshed_at: datetime | None = None

    def for_call(self, session_id: str, workspace: str | None) -> dict[str, Any]:
        """{session: {..., today: {...}}, workspace: {..., today: {...}}}, from memory;
        figures as of `refreshed_at` (see the module's note on their age)."""
        state = self._state
        return {
            "session": _figures(state.session, state.session_today, session_id),
            "workspace": _figures(state.workspace, state.workspace_today, workspace or ""),
        }

    def refresh(self) -> None:
        """Add the rows the read model gained since the last refresh (all of them, once)."""
        with self._lock:
            state = self._state
            today = _today()
            if today != state.day:
                state = self._day_started(state, today)
            rows = self.store.query(
                "SELECT position, session_id, workspace_id, day, input_tokens, output_tokens, "
                "cache_read_tokens, cache_creation_tokens, cost_usd FROM rm_model_requests "
                "WHERE position > ? ORDER BY position",
                (state.position,),
            )
            for row in rows:
                _add(state.session, row["session_id"], row)
                _add(state.workspace, row["workspace_id"], row)
                if row["day"] == state.day:
                    _add(state.session_today, row["session_id"], row)
                    _add(state.workspace_today, row["workspace_id"], row)
                state.position = max(state.position, int(row["position"]))
            self._state = state
            self.refreshed_at = datetime.now(UTC)

    def _day_started(self, old: _State, today: str) -> _State:
        """A new day: totals carry over, today's figures are read afresh."""
        state = _State(old.position, today, old.session, {}, old.workspace, {})
        rows = self.store.query(
            "SELECT session_id, workspace_id, input_tokens, output_tokens, cache_read_tokens, "
            "cache_creation_tokens, cost_usd FROM rm_model_requests WHERE day = ? "
            "AND position <= ?",
            (today, old.position),
        )
        for row in rows:
            _add(state.session_today, row["session_id"], row)
            _add(state.workspace_today, row["workspace_id"], row)
        return state

    def start(self) -> None:
        if self._thread is None:
            self._stop.clear()
            self._thread = threading.Thread(target=self._follow, name="usage-figures", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(timeout=10)

    def _follow(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.refresh()
            except Exception:  # noqa: BLE001 - the store may be down; try again next time
                log.warning("usage figures not refreshed", exc_info=True)


def _add(totals: dict[str, Totals], key: str, row: dict[str, Any]) -> None:
    found = totals.get(key)
    if found is None:
        found = totals[key] = Totals()
    found.add(row)


def _figures(total: dict[str, Totals], today: dict[str, Totals], key: str) -> dict[str, Any]:
    return {
        **(total.get(key) or Totals()).wire(),
        "today": (today.get(key) or Totals()).wire(),
    }
