"""Steady reconnects for the psycopg pools Tachograph builds, one pool at a time.

psycopg_pool doubles the delay after each failed attempt (1, 2, 4, 8, ... s, for up to
five minutes), so after a ten-second outage a pool could stay empty for half a minute
more while the database was already back. The breaker in front of the recorder already
stops requests from piling up, so retrying about once a second costs little.

The library has no setting for it, and changing `AttemptWithBackoff.DELAY_BACKOFF`
would change every pool in the process. A pool backs off in two places, and both are
replaced on the pool given here: the reconnect task (`_add_connection`, which starts
an attempt and reschedules itself with it) and the wait of `getconn` after a failed
check (`_getconn_with_check_loop`). Covering only the first left recovery after an
outage slower than tests/test_database_outage.py allows in one of three full runs: a
request that had met a dead connection slept 1, 2, 4 s between checks while the
database was back. Both bodies follow psycopg_pool 3.3; tests/test_pool_reconnect.py
holds them to the library's behaviour.
"""

from __future__ import annotations

from time import monotonic, sleep
from typing import Any

from psycopg_pool import PoolTimeout
from psycopg_pool.base import AttemptWithBackoff


class SteadyAttempt(AttemptWithBackoff):
    """An attempt that retries about once a second until it gives up."""

    DELAY_BACKOFF = 1.0


def steady_reconnects(pool: Any) -> None:
    """Make `pool` retry lost connections and failed checks about once a second."""
    add_connection = pool._add_connection

    def steady_add_connection(attempt: AttemptWithBackoff | None, growing: bool = False) -> None:
        add_connection(attempt or SteadyAttempt(timeout=pool.reconnect_timeout), growing)

    def steady_check_loop(deadline: float) -> Any:
        attempt: SteadyAttempt | None = None
        while True:
            conn = pool._getconn_unchecked(deadline - monotonic())
            try:
                pool._check_connection(conn)
            except Exception:
                pool._putconn(conn, from_getconn=True)
            except BaseException:
                # Cancellation: keep the connection, but do not try again.
                pool._putconn(conn, from_getconn=True)
                raise
            else:
                return conn
            now = monotonic()
            if attempt is None:
                attempt = SteadyAttempt(timeout=deadline - now)
            else:
                attempt.update_delay(now)
            if attempt.time_to_give_up(now):
                raise PoolTimeout()
            sleep(attempt.delay)

    pool._add_connection = steady_add_connection
    pool._getconn_with_check_loop = steady_check_loop
