"""Tachograph's pools retry about once a second, and no other pool changes (PostgreSQL)."""

from __future__ import annotations

import socket
import time
from typing import Any

import pytest
from psycopg_pool import ConnectionPool, PoolTimeout
from psycopg_pool.base import AttemptWithBackoff

import infra.pool_reconnect as pool_reconnect
from bootstrap import build_services
from infra.pool_reconnect import steady_reconnects
from infra.settings import Settings
from tests.conftest import pg_url


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def reconnect_delays(pool: Any, attempts: int) -> list[float]:
    """Run the pool's reconnect task `attempts` times, collecting the delays it asks for."""
    scheduled: list[tuple[Any, float]] = []
    pool.schedule_task = lambda task, delay: scheduled.append((task, delay))
    pool._add_connection(None)
    while len(scheduled) < attempts:
        task, _ = scheduled[-1]
        task._run(pool)
    return [delay for _, delay in scheduled]


def refused_pool() -> ConnectionPool[Any]:
    return ConnectionPool(
        f"host=127.0.0.1 port={closed_port()} connect_timeout=1", min_size=1, open=False
    )


def test_reconnect_task_retries_steadily_where_the_library_doubles() -> None:
    library = reconnect_delays(refused_pool(), 4)
    # Jitter is ±10 % on the first delay; the library doubles each one after it.
    assert library[1] == pytest.approx(2 * library[0])
    assert library[3] == pytest.approx(8 * library[0])
    steady_pool = refused_pool()
    steady_reconnects(steady_pool)
    steady = reconnect_delays(steady_pool, 4)
    assert 0.9 <= steady[0] <= 1.1
    assert steady == [steady[0]] * 4


class FakeClock:
    """monotonic/sleep for the check loop: sleeping advances time without waiting."""

    def __init__(self) -> None:
        self.now = time.monotonic()
        self.sleeps: list[float] = []

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


@pytest.mark.parametrize("store_kind", ["postgres"], indirect=True)
def test_failed_checks_are_retried_steadily_until_the_deadline(
    monkeypatch: pytest.MonkeyPatch, store_kind: str
) -> None:
    checks: list[object] = []

    def failing_check(conn: object) -> None:
        checks.append(conn)
        raise OSError("connection looks dead")

    pool: ConnectionPool[Any] = ConnectionPool(
        pg_url().conninfo(), min_size=1, max_size=1, check=failing_check, open=True
    )
    try:
        pool.wait(timeout=10)
        steady_reconnects(pool)
        clock = FakeClock()
        monkeypatch.setattr(pool_reconnect, "monotonic", clock.monotonic)
        monkeypatch.setattr(pool_reconnect, "sleep", clock.sleep)
        with pytest.raises(PoolTimeout):
            pool.getconn(timeout=8)
    finally:
        pool.close()
    # The library checks again at once, then waits 1, 2, 4 s: four checks in 8 s.
    assert clock.sleeps[0] == 0.0
    assert all(0.9 <= delay <= 1.1 for delay in clock.sleeps[1:-1])
    assert len(checks) >= 8


@pytest.mark.parametrize("store_kind", ["postgres"], indirect=True)
def test_building_the_services_leaves_the_library_class_alone(settings: Settings) -> None:
    services = build_services(settings)
    try:
        assert AttemptWithBackoff.DELAY_BACKOFF == 2.0
        for pool in (services.app.recorder.datastore.pool, services.store.pool):  # type: ignore[attr-defined]
            assert pool._getconn_with_check_loop.__qualname__.startswith("steady_reconnects")
    finally:
        services.stop()
