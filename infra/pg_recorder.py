"""PostgreSQL recorder that fails fast during an outage.

The library retries each call ten times, each waiting up to the pool timeout: a
request would hang ~50 s when the database is down. Here a call is retried once, for
the stale pooled connection that a retry heals, and not after a pool timeout.

That still costs a pool timeout (2 s) per call while the database is gone, and
under load calls queue behind each other (the group-commit writer is one thread). So a
breaker opens on the first failure: while it is open, calls fail at once, and one call
at a time probes the database after a short cool-down; the first success closes it.
Service resumes by itself within about a cool-down of the database returning.
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Sequence
from typing import Any

import psycopg
from eventsourcing.persistence import InterfaceError, OperationalError, StoredEvent
from eventsourcing.postgres import PostgresApplicationRecorder
from psycopg_pool import PoolTimeout

from infra.pg_append import AppendFunction

COOL_DOWN_S = 1.0
_UNREACHABLE = (InterfaceError, OperationalError)


class Breaker:
    """Closed, or open after a failure: then only one probe at a time, once cooled down."""

    def __init__(self, cool_down_s: float = COOL_DOWN_S) -> None:
        self.cool_down_s = cool_down_s
        self._lock = threading.Lock()
        self._open = False
        self._retry_at = 0.0
        self._probing = False

    @property
    def is_open(self) -> bool:
        return self._open

    def enter(self) -> bool:
        """Admit a call (True when it is the probe) or raise OperationalError at once."""
        if not self._open:
            return False
        with self._lock:
            if not self._open:
                return False
            if not self._probing and time.monotonic() >= self._retry_at:
                self._probing = True
                return True
        raise OperationalError("the database is unreachable (failing fast until it answers)")

    def leave(self, probe: bool, error: BaseException | None) -> None:
        """Record how the admitted call ended: any answer from the server closes the breaker."""
        reached = error is None or not unreachable(error)
        with self._lock:
            if probe:
                self._probing = False
            if reached:
                self._open = False
            else:
                self._open = True
                self._retry_at = time.monotonic() + self.cool_down_s


def unreachable(error: BaseException) -> bool:
    """Whether an error means the server could not be reached (not: it answered with an error).

    Server-side errors carry a SQLSTATE (a lock timeout, a constraint); connection
    failures and pool timeouts do not.
    """
    seen: BaseException | None = error
    while seen is not None:
        if isinstance(seen, psycopg.Error):
            return isinstance(seen, psycopg.OperationalError | psycopg.InterfaceError) and (
                seen.sqlstate is None
            )
        seen = seen.__cause__
    return isinstance(error, _UNREACHABLE)


def _caused_by(error: BaseException, kind: type[BaseException]) -> bool:
    seen: BaseException | None = error
    while seen is not None:
        if isinstance(seen, kind):
            return True
        seen = seen.__cause__
    return False


def _fail_fast(method: Any) -> Any:
    call = getattr(method, "__wrapped__", method)  # skip the library's ten-attempt retry

    def attempts(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return call(self, *args, **kwargs)
        except _UNREACHABLE as exc:
            if _caused_by(exc, PoolTimeout):
                raise  # no connection came within the pool timeout: a retry would wait again
        time.sleep(0.05)  # a stale pooled connection: the retry gets a fresh one
        return call(self, *args, **kwargs)

    @functools.wraps(attempts)
    def guarded(self: FastFailPostgresApplicationRecorder, *args: Any, **kwargs: Any) -> Any:
        breaker = self.breaker
        probe = breaker.enter()
        error: BaseException | None = None
        try:
            return attempts(self, *args, **kwargs)
        except BaseException as exc:
            error = exc
            raise
        finally:
            breaker.leave(probe, error)

    return guarded


class FastFailPostgresApplicationRecorder(PostgresApplicationRecorder):
    """The stock recorder with a two-attempt retry budget behind a breaker.

    Appends call `AppendFunction` (infra/pg_append.py): the library's statements in one
    round trip, at a fraction of the CPU.
    """

    def create_table(self) -> None:
        super().create_table()
        self._append_function.install()

    @property
    def _append_function(self) -> AppendFunction:
        append: AppendFunction | None = self.__dict__.get("_append_function_")
        if append is None:
            append = self.__dict__.setdefault("_append_function_", AppendFunction(self))
        return append

    def _append(self, stored_events: Sequence[StoredEvent], **kwargs: Any) -> Sequence[int] | None:
        if any(value is not None for value in kwargs.values()):  # a tracking record: stock path
            stock = PostgresApplicationRecorder.insert_events.__wrapped__
            ids: Sequence[int] | None = stock(self, stored_events, **kwargs)
            return ids
        return self._append_function(stored_events)

    insert_events = _fail_fast(_append)
    select_events = _fail_fast(PostgresApplicationRecorder.select_events)
    select_notifications = _fail_fast(PostgresApplicationRecorder.select_notifications)
    max_notification_id = _fail_fast(PostgresApplicationRecorder.max_notification_id)

    @property
    def breaker(self) -> Breaker:
        breaker: Breaker | None = self.__dict__.get("_breaker")
        if breaker is None:
            breaker = self.__dict__.setdefault("_breaker", Breaker())
        return breaker
