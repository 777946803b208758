"""Signed checkpoints and RFC 6962 proofs against them, as the routes and CLI serve them.

Proofs are given only against tree sizes a signed checkpoint commits to: a proof
against an unsigned size proves nothing to an auditor who trusts the key alone.
Hashes are standard base64, as in C2SP checkpoints.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from functools import partial
from typing import Any

from domain.errors import NotFound, RuleViolation
from domain.merkle import consistency_proof, inclusion_proof
from projections.log_cosignatures import COSIGNATURES_TABLE, cosignature_lines
from projections.log_tree import NOTES_TABLE, leaf_at, live_tables, read_nodes
from projections.store import ReadStore


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


@dataclass(frozen=True)
class SignedCheckpoint:
    size: int
    position: int
    root: bytes
    note: str


def _checkpoint(row: dict[str, Any]) -> SignedCheckpoint:
    return SignedCheckpoint(
        int(row["size"]), int(row["position"]), bytes.fromhex(row["root"]), str(row["note"])
    )


def latest_checkpoint(store: ReadStore) -> SignedCheckpoint | None:
    row = store.query_one(f"SELECT * FROM {NOTES_TABLE} ORDER BY size DESC LIMIT 1")
    return None if row is None else _checkpoint(row)


def witnessed_checkpoint(store: ReadStore, position: int) -> SignedCheckpoint | None:
    """The largest signed checkpoint covering `position` that a witness cosigned, if any."""
    row = store.query_one(
        f"SELECT * FROM {NOTES_TABLE} n WHERE position >= ? AND EXISTS "
        f"(SELECT 1 FROM {COSIGNATURES_TABLE} c WHERE c.size = n.size) "
        "ORDER BY size DESC LIMIT 1",
        (position,),
    )
    return None if row is None else _checkpoint(row)


def cosigned_note(store: ReadStore, checkpoint: SignedCheckpoint) -> str:
    """The checkpoint's signed note with every witness cosignature recorded for its size."""
    return checkpoint.note + "".join(cosignature_lines(store, checkpoint.size))


def signed_checkpoint(store: ReadStore, size: int, field: str) -> SignedCheckpoint:
    """The signed checkpoint of exactly this tree size; a 422 naming `field` otherwise."""
    row = store.query_one(f"SELECT * FROM {NOTES_TABLE} WHERE size = ?", (size,))
    if row is None:
        latest = latest_checkpoint(store)
        hint = f"the latest is {latest.size}" if latest else "none is signed yet"
        raise RuleViolation(
            f"{field} {size} is not the size of a signed checkpoint ({hint})", field=field
        )
    return _checkpoint(row)


def inclusion(store: ReadStore, position: int, tree_size: int) -> dict[str, Any]:
    """`{position, leafIndex, treeSize, leafHash, hashes}` for one event."""
    checkpoint = signed_checkpoint(store, tree_size, "treeSize")
    leaf = leaf_at(store, position)
    if leaf is None:
        raise NotFound(f"no event at position {position} in the Merkle tree", field="position")
    index, leaf_hash = leaf
    if index >= checkpoint.size:
        raise RuleViolation(
            f"position {position} is leaf {index}, not in the tree of size {tree_size}",
            field="position",
        )
    proof = inclusion_proof(index, tree_size, partial(read_nodes, store, live_tables()))
    return {
        "position": position,
        "leafIndex": index,
        "treeSize": tree_size,
        "leafHash": b64(leaf_hash),
        "hashes": [b64(h) for h in proof],
    }


def consistency(store: ReadStore, old: int, new: int) -> dict[str, Any]:
    """`{from, to, hashes}` between two signed tree sizes."""
    signed_checkpoint(store, old, "from")
    signed_checkpoint(store, new, "to")
    if old > new:
        raise RuleViolation(f"from {old} is larger than to {new}", field="from")
    proof = consistency_proof(old, new, partial(read_nodes, store, live_tables()))
    return {"from": old, "to": new, "hashes": [b64(h) for h in proof]}
