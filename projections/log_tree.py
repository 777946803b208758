"""The log's Merkle tree read model and the ledger of its signed checkpoints (signed notes).

`rm_log_leaves` holds one row per event (leaf index, position, leaf hash) and
`rm_log_nodes` every complete subtree above the leaves (level, index, hash), written in
the runner's batch transaction as each subtree completes; rows never change afterwards.
An inclusion or consistency proof at any tree size is then one or two batches of point
reads (domain/merkle.py). Both tables are a pure function of the log, rebuilt exactly by
`replay`; like the hash chain, a rebuild may never replace them unless equal.

`log_notes` is a ledger outside the rebuildable tables (as `log_checkpoints` is): one
row per signed tree size, the C2SP checkpoint signed with the log's Ed25519 note key. The
live projection signs at the end of a batch once `every_events` leaves were added since
the last note, or `every_seconds` passed with leaves unsigned; `sign_head` signs a quiet
tail (a periodic job and shutdown). One row per size: a second replica's note of the same
size is dropped, never replacing the first. Cosignatures of witnesses are kept beside it
(projections/log_cosignatures.py), keyed by size.
"""

from __future__ import annotations

import logging
import time
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from hashlib import sha256
from typing import Any

from domain.merkle import CompactRange, Node, range_nodes
from domain.merkle_verify import RecordedLeaf
from projections.base import Envelope, Projection
from projections.log_checkpoints import rows_through
from projections.log_cosignatures import COSIGNATURES_DDL
from projections.store import Cursor, ReadStore

log = logging.getLogger(__name__)

LIVE_PREFIX = "rm_"
LEAVES_TABLE = LIVE_PREFIX + "log_leaves"
NODES_TABLE = LIVE_PREFIX + "log_nodes"
NOTES_TABLE = "log_notes"

# (tree size, root hash) -> the signed note of that checkpoint.
CheckpointSigner = Callable[[int, bytes], str]

_NOTES_DDL = (
    f"CREATE TABLE IF NOT EXISTS {NOTES_TABLE} (size BIGINT PRIMARY KEY, "
    "position BIGINT NOT NULL, root TEXT NOT NULL, note TEXT NOT NULL, recorded_at TEXT NOT NULL)"
)


@dataclass(slots=True)
class _Head:
    position: int
    tree: CompactRange
    signed_size: int


class LogTreeProjection(Projection):
    """Adds every event as a leaf and keeps each complete subtree as it forms."""

    name = "log_tree"
    tables = {
        "log_leaves": [
            "CREATE TABLE IF NOT EXISTS {t} (idx BIGINT PRIMARY KEY, "
            "position BIGINT NOT NULL, hash TEXT NOT NULL)",
            "CREATE UNIQUE INDEX IF NOT EXISTS {t}_position ON {t} (position)",
            # The ledgers sit beside the tree but are none of its tables (never rebuilt).
            _NOTES_DDL,
            COSIGNATURES_DDL,
        ],
        "log_nodes": [
            "CREATE TABLE IF NOT EXISTS {t} (level INTEGER NOT NULL, idx BIGINT NOT NULL, "
            "hash TEXT NOT NULL, PRIMARY KEY (level, idx))",
        ],
    }
    swap_requires_equal = True
    applies_in_bulk = True

    def __init__(self, prefix: str = LIVE_PREFIX) -> None:
        super().__init__(prefix)
        # Set by the composition root; None: the tree is kept but nothing is signed.
        self.signer: CheckpointSigner | None = None
        self.every_events = 1000
        self.every_seconds = 60.0
        self.records_notes = prefix == LIVE_PREFIX
        self._head: tuple[weakref.ref[Cursor], _Head] | None = None
        self._leaves: list[tuple[int, int, str]] = []
        self._nodes: list[tuple[int, int, str]] = []
        self._last_signed_at = time.monotonic()

    def reads(self, event_type: str) -> bool:
        return True  # every event is a leaf

    def begin_batch(self, cur: Cursor) -> None:
        self._leaves, self._nodes = [], []

    def apply(self, cur: Cursor, envelope: Envelope) -> None:
        self.apply_all(cur, [envelope])

    def apply_all(self, cur: Cursor, envelopes: Sequence[Envelope]) -> None:
        head = self._current_head(cur)
        tree, position = head.tree, head.position
        for e in envelopes:
            if e.position <= position:
                continue
            position = e.position
            digest = sha256(b"\x00" + e.head)  # leaf_hash(event_leaf(...)), no copies
            digest.update(e.state)
            leaf = digest.digest()
            for (level, index), h in tree.append(leaf):
                if level == 0:
                    self._leaves.append((index, position, h.hex()))
                else:
                    self._nodes.append((level, index, h.hex()))
        head.position = position

    def end_batch(self, cur: Cursor) -> None:
        if self._leaves:
            cur.executemany(
                f"INSERT INTO {self.t['log_leaves']} (idx, position, hash) VALUES (?,?,?)",
                self._leaves,
            )
        if self._nodes:
            cur.executemany(
                f"INSERT INTO {self.t['log_nodes']} (level, idx, hash) VALUES (?,?,?)",
                self._nodes,
            )
        if self._leaves and self.records_notes and self.signer is not None:
            head = self._current_head(cur)
            due = head.tree.size - head.signed_size >= self.every_events or (
                time.monotonic() - self._last_signed_at >= self.every_seconds
            )
            if due:
                self._sign(cur, head)
        self._leaves, self._nodes = [], []

    def _sign(self, cur: Cursor, head: _Head) -> None:
        assert self.signer is not None
        size, root = head.tree.size, head.tree.root()
        insert_note(cur, size, head.position, root, self.signer(size, root))
        head.signed_size = size
        self._last_signed_at = time.monotonic()

    def sign_head(self, store: ReadStore) -> int | None:
        """Sign the tree's current size if no note covers it yet; the size signed."""
        if self.signer is None or not self.records_notes:
            return None
        with store.transaction() as cur:
            head = self._load_head(cur)
            if head.tree.size <= head.signed_size:
                return None
            self._sign(cur, head)
            return head.tree.size

    def _current_head(self, cur: Cursor) -> _Head:
        # Cached for one transaction only (one cursor each): another replica may grow
        # the tree between our batches, and a rolled-back batch must leave nothing.
        if self._head is not None and self._head[0]() is cur:
            return self._head[1]
        head = self._load_head(cur)
        self._head = (weakref.ref(cur), head)
        return head

    def _load_head(self, cur: Cursor) -> _Head:
        cur.execute(f"SELECT idx, position FROM {self.t['log_leaves']} ORDER BY idx DESC LIMIT 1")
        row = cur.fetchone()
        size, position = (0, 0) if row is None else (int(row["idx"]) + 1, int(row["position"]))
        edge = range_nodes(0, size)
        found = read_nodes(cur, self.t, edge)
        cur.execute(f"SELECT MAX(size) AS size FROM {NOTES_TABLE}")
        signed = cur.fetchone()
        signed_size = int(signed["size"]) if signed and signed["size"] is not None else 0
        return _Head(position, CompactRange(size, [found[n] for n in edge]), signed_size)


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def insert_note(cur: Cursor, size: int, position: int, root: bytes, note: str) -> None:
    """Append a signed checkpoint; an existing one of that size is never replaced."""
    cur.execute(
        f"INSERT INTO {NOTES_TABLE} (size, position, root, note, recorded_at) "
        "VALUES (?,?,?,?,?) ON CONFLICT (size) DO NOTHING",
        (size, position, root.hex(), note, _now()),
    )


class _Reader:
    """Runs `query(sql, params)` on a cursor or a store alike."""

    def __init__(self, source: Cursor | ReadStore) -> None:
        self.source = source

    def query(self, sql: str, params: Sequence[Any]) -> list[dict[str, Any]]:
        if isinstance(self.source, ReadStore):
            return self.source.query(sql, params)
        self.source.execute(sql, params)
        return list(self.source.fetchall())


def read_nodes(
    source: Cursor | ReadStore, tables: Mapping[str, str], nodes: Iterable[Node]
) -> dict[Node, bytes]:
    """The hashes of complete subtrees: one query for leaves, one for the nodes above."""
    reader = _Reader(source)
    wanted = set(nodes)
    found: dict[Node, bytes] = {}
    leaves = sorted(i for level, i in wanted if level == 0)
    if leaves:
        marks = ",".join("?" * len(leaves))
        for r in reader.query(
            f"SELECT idx, hash FROM {tables['log_leaves']} WHERE idx IN ({marks})", leaves
        ):
            found[(0, int(r["idx"]))] = bytes.fromhex(r["hash"])
    upper = sorted(n for n in wanted if n[0] > 0)
    if upper:
        where = " OR ".join("(level = ? AND idx = ?)" for _ in upper)
        params = [v for n in upper for v in n]
        for r in reader.query(
            f"SELECT level, idx, hash FROM {tables['log_nodes']} WHERE {where}", params
        ):
            found[(int(r["level"]), int(r["idx"]))] = bytes.fromhex(r["hash"])
    missing = wanted - found.keys()
    if missing:
        raise LookupError(f"the Merkle read model lacks subtrees {sorted(missing)[:3]}")
    return found


def live_tables() -> dict[str, str]:
    return {"log_leaves": LEAVES_TABLE, "log_nodes": NODES_TABLE}


def attach_note_signer(
    projections: Iterable[Projection],
    signer: CheckpointSigner | None,
    every_events: int,
    every_seconds: float,
) -> None:
    """Give the live tree projection the note key's signer and when to sign."""
    for projection in projections:
        if isinstance(projection, LogTreeProjection):
            projection.signer = signer
            projection.every_events = every_events
            projection.every_seconds = every_seconds


def sign_log_head(projections: Iterable[Projection], store: ReadStore) -> int | None:
    """Sign the live tree's head if unsigned (never fails a job or a shutdown)."""
    tree = next((p for p in projections if isinstance(p, LogTreeProjection)), None)
    if tree is None:
        return None
    try:
        return tree.sign_head(store)
    except Exception as exc:  # noqa: BLE001 - the next batch or job signs instead
        log.warning("no signed checkpoint recorded: %s: %s", type(exc).__name__, exc)
        return None


def recorded_leaves(store: ReadStore, upto: int, batch: int = 10_000) -> Iterator[RecordedLeaf]:
    """The live tree's leaves at or below a position, in log order, read in pages."""
    for r in rows_through(store, LEAVES_TABLE, upto, batch):
        yield RecordedLeaf(int(r["idx"]), int(r["position"]), bytes.fromhex(r["hash"]))


def signed_notes(store: ReadStore) -> list[tuple[int, int, str]]:
    """Every signed checkpoint in the ledger as (size, position, note), oldest first."""
    rows = store.query(f"SELECT size, position, note FROM {NOTES_TABLE} ORDER BY size")
    return [(int(r["size"]), int(r["position"]), str(r["note"])) for r in rows]


def tree_size(store: ReadStore) -> int:
    """How many leaves the live tree holds."""
    row = store.query_one(f"SELECT MAX(idx) AS idx FROM {LEAVES_TABLE}")
    return 0 if row is None or row["idx"] is None else int(row["idx"]) + 1
