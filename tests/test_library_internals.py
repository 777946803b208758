"""Every private member of eventsourcing, psycopg or psycopg_pool the product overrides or
calls, held to the library release it was written against (SPEC §1: library internals
used on purpose; docs/design.md lists each with the figure it buys).

When a library changes one of them, this fails first and names the installed release
and the module that relies on it, instead of a slower or subtly wrong path passing.
"""

from __future__ import annotations

import importlib.metadata
import inspect
from typing import Any

import pytest
from eventsourcing.application import Application
from eventsourcing.domain import BaseAggregate
from psycopg_pool import ConnectionPool

# (library, owner, member, the signature relied on, who relies on it and why)
INTERNALS: list[tuple[str, Any, str, str, str]] = [
    (
        "eventsourcing",
        Application,
        "_record",
        "(self, processing_event: 'ProcessingEvent[TAggregateID]')"
        " -> 'list[Recording[TAggregateID]]'",
        "domain/application.py save_events: ~10 µs per event less than save()",
    ),
    (
        "eventsourcing",
        Application,
        "_notify",
        "(self, recordings: 'list[Recording[TAggregateID]]') -> 'None'",
        "domain/application.py: recordings observed after every durable save",
    ),
    (
        "eventsourcing",
        Application,
        "_take_snapshots",
        "(self, processing_event: 'ProcessingEvent[TAggregateID]') -> 'None'",
        "domain/application.py save_events: the steps of save() kept",
    ),
    (
        "eventsourcing",
        BaseAggregate,
        "_create",
        "(event_class: 'type[CanInitAggregate[TAggregateID]]', *,"
        " id: 'TAggregateID | None' = None, **kwargs: 'Any') -> 'Self'",
        "domain/hook_dispatch_record.py creation_event: ~30 µs per ingest less",
    ),
    (
        "psycopg_pool",
        ConnectionPool,
        "_add_connection",
        "(self, attempt: 'AttemptWithBackoff | None', growing: 'bool' = False) -> 'None'",
        "infra/pool_reconnect.py: reconnect about once a second after an outage",
    ),
    (
        "psycopg_pool",
        ConnectionPool,
        "_getconn_with_check_loop",
        "(self, deadline: 'float') -> 'CT'",
        "infra/pool_reconnect.py: a failed check retried about once a second",
    ),
    (
        "psycopg_pool",
        ConnectionPool,
        "_getconn_unchecked",
        "(self, timeout: 'float') -> 'CT'",
        "infra/pool_reconnect.py steady_check_loop",
    ),
    (
        "psycopg_pool",
        ConnectionPool,
        "_check_connection",
        "(self, conn: 'CT') -> 'None'",
        "infra/pool_reconnect.py steady_check_loop",
    ),
    (
        "psycopg_pool",
        ConnectionPool,
        "_putconn",
        "(self, conn: 'CT', from_getconn: 'bool') -> 'None'",
        "infra/pool_reconnect.py steady_check_loop",
    ),
]
# The releases the members above were read in; a new release is checked, then listed.
CHECKED = {"eventsourcing": ("9.5.6",), "psycopg_pool": ("3.3.",)}


@pytest.mark.parametrize(
    ("library", "owner", "member", "signature", "relied_on_by"),
    INTERNALS,
    ids=[f"{i[0]}:{i[2]}" for i in INTERNALS],
)
def test_a_private_member_relied_on_is_there_as_it_was_read(
    library: str, owner: Any, member: str, signature: str, relied_on_by: str
) -> None:
    release = importlib.metadata.version(library)
    where = f"{library} {release}: {owner.__name__}.{member}, relied on by {relied_on_by}"
    assert release.startswith(CHECKED[library]), f"unchecked release of {where}"
    found = getattr(owner, member, None)
    assert found is not None, f"{where} is gone"
    assert str(inspect.signature(found)) == signature, f"{where} changed its signature"


def test_the_pool_check_the_product_swaps_is_the_one_the_pool_calls() -> None:
    """infra/event_store.py sets `pool._check` (the only check hook the pool has): the
    pool must still keep its check there and call it on checkout."""
    source = inspect.getsource(ConnectionPool)
    release = importlib.metadata.version("psycopg_pool")
    assert "self._check = check" in source, f"psycopg_pool {release} keeps its check elsewhere"
    assert "self._check(conn)" in source, f"psycopg_pool {release} no longer calls _check"
