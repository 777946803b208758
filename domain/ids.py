"""Deterministic identifiers: every idempotent create derives its aggregate ID here."""

from __future__ import annotations

import os
import re
import threading
import time
from uuid import UUID, uuid5

# Fixed forever: changing it would orphan every deterministic ID already stored.
PROJECT_NAMESPACE = UUID("5b3f7c1e-2d4a-5e8f-9a61-7c0d2b4e8f13")

WORKSPACE_SLUG = re.compile(r"^[a-z0-9][a-z0-9-]{0,62}$")


def stable_id(kind: str, *parts: str) -> UUID:
    """UUIDv5 of a kind and its natural key, in the project namespace."""
    return uuid5(PROJECT_NAMESPACE, ":".join((kind, *parts)))


def workspace_id(slug: str) -> UUID:
    """Aggregate ID of the workspace with this slug."""
    return stable_id("workspace", slug)


_RANDOM = threading.local()
_IDS_PER_READ = 256


def random_id() -> UUID:
    """A version-4 UUID, like `uuid4()`, from a buffered read of the OS's CSPRNG.

    One `os.urandom` call per 256 ids instead of one per id: on the ingest hot path
    every syscall hands the interpreter lock to a busy thread and waits to get it back.
    """
    return UUID(bytes=_random_bytes(), version=4)


def time_ordered_id() -> UUID:
    """A version-7 UUID (RFC 9562): the Unix time in milliseconds in its first 48 bits,
    then 74 random bits from the same buffered CSPRNG read as `random_id`.

    For the aggregates created at ingest rate (a hook dispatch without an eventId). The
    log's key index is ordered by id: a random id put each new event's entry on a random
    page of it, so every commit rewrote about as many index pages as it had events, a
    cost that grew with the log; ids in time order go in at its end (docs/performance.md).
    """
    raw = bytearray(_random_bytes())
    raw[0:6] = (time.time_ns() // 1_000_000).to_bytes(6, "big")
    raw[6] = 0x70 | (raw[6] & 0x0F)  # version 7
    raw[8] = 0x80 | (raw[8] & 0x3F)  # the RFC's variant
    return UUID(bytes=bytes(raw))


def random_token() -> str:
    """32 random hex digits (128 bits) from the same buffered CSPRNG read as `random_id`,
    for ids that need no UUID object (a request id)."""
    return _random_bytes().hex()


def _random_bytes() -> bytes:
    """16 bytes of the OS's CSPRNG, from this thread's buffer of them."""
    pool: list[bytes] | None = getattr(_RANDOM, "pool", None)
    if not pool:
        data = os.urandom(16 * _IDS_PER_READ)
        pool = _RANDOM.pool = [data[i : i + 16] for i in range(0, len(data), 16)]
    return pool.pop()


def forget_buffered_ids() -> None:
    """Drop the buffered randomness: a forked child must never hand out the ids its
    parent still holds. The composition root registers it to run after every fork."""
    global _RANDOM
    _RANDOM = threading.local()
