"""Deterministic identifiers: every idempotent create derives its aggregate ID here."""

from __future__ import annotations

import re
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
