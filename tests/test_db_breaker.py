"""The database breaker: fail at once while PostgreSQL is unreachable, probe, close on answer."""

from __future__ import annotations

import psycopg
import pytest
from eventsourcing.persistence import OperationalError
from psycopg_pool import PoolTimeout

from infra.pg_recorder import Breaker, unreachable


def wrapped(cause: BaseException) -> OperationalError:
    try:
        raise OperationalError(str(cause)) from cause
    except OperationalError as exc:
        return exc


def test_connection_failures_open_it_and_callers_then_fail_at_once() -> None:
    breaker = Breaker(cool_down_s=60)
    assert breaker.enter() is False
    breaker.leave(False, wrapped(psycopg.OperationalError("connection refused")))
    assert breaker.is_open
    with pytest.raises(OperationalError, match="unreachable"):
        breaker.enter()


def test_after_the_cool_down_one_probe_goes_and_an_answer_closes_it() -> None:
    breaker = Breaker(cool_down_s=0)
    breaker.leave(False, wrapped(PoolTimeout("no connection")))
    assert breaker.enter() is True  # the probe
    with pytest.raises(OperationalError):
        breaker.enter()  # only one probe at a time
    breaker.leave(True, None)
    assert not breaker.is_open and breaker.enter() is False


def test_a_failed_probe_keeps_it_open() -> None:
    breaker = Breaker(cool_down_s=0)
    breaker.leave(False, wrapped(psycopg.OperationalError("refused")))
    probe = breaker.enter()
    breaker.leave(probe, wrapped(psycopg.OperationalError("still refused")))
    assert breaker.is_open


@pytest.mark.parametrize(
    "error",
    [
        psycopg.errors.LockNotAvailable("lock timeout"),
        psycopg.errors.UniqueViolation("duplicate"),
        psycopg.errors.QueryCanceled("statement timeout"),
        ValueError("a bug, not the database"),
    ],
)
def test_errors_the_server_answered_with_do_not_open_it(error: Exception) -> None:
    breaker = Breaker()
    assert not unreachable(wrapped(error) if isinstance(error, psycopg.Error) else error)
    breaker.leave(False, wrapped(error) if isinstance(error, psycopg.Error) else error)
    assert not breaker.is_open
