"""The log's Merkle tree, kept by the chain projection, and the ledger of its signed notes.

The tree is stored in two places, both written in the runner's batch transaction by the
chain projection (projections/log_checkpoints.py), which hashes each event's link and
leaf in one loop:

- the leaf hash of each event sits beside its chain link, in `rm_log_links.leaf` (leaf
  index = seq - 1), so the tree adds no row and no index per event;
- `rm_log_nodes` keeps the complete subtrees of every fourth level (4, 8, 12, ...; see
  domain/merkle.py `STRIDE`), about one row per 15 events; a subtree of any other level
  is derived on demand from the at most eight stored ones it is made of.

Rows never change once written. A proof at any tree size is then two reads (a few
ranges of leaves, a few ranges of nodes) and a few dozen hashes. Hashes are hex text,
as the chain's links are: one column type on both stores (bytes would need BLOB on one
and BYTEA on the other), and an upgrade from the former layout is plain SQL
(`migrate_former_layout`).

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
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from domain.merkle import STRIDE, CompactRange, Node, from_stored, range_nodes
from domain.merkle_verify import RecordedLeaf
from projections.store import Cursor, ReadStore

log = logging.getLogger(__name__)

LIVE_PREFIX = "rm_"
LINKS_TABLE = LIVE_PREFIX + "log_links"
NODES_TABLE = LIVE_PREFIX + "log_nodes"
NOTES_TABLE = "log_notes"
# The former layout's per-event table (one leaf row each), dropped on upgrade.
FORMER_LEAVES_TABLE = LIVE_PREFIX + "log_leaves"
FORMER_TRACKING = "log_tree"

# (tree size, root hash) -> the signed note of that checkpoint.
CheckpointSigner = Callable[[int, bytes], str]

NOTES_DDL = (
    f"CREATE TABLE IF NOT EXISTS {NOTES_TABLE} (size BIGINT PRIMARY KEY, "
    "position BIGINT NOT NULL, root TEXT NOT NULL, note TEXT NOT NULL, recorded_at TEXT NOT NULL)"
)
NODES_DDL = (
    "CREATE TABLE IF NOT EXISTS {t} (level INTEGER NOT NULL, idx BIGINT NOT NULL, "
    "hash TEXT NOT NULL, PRIMARY KEY (level, idx))"
)


class TreeKeeper:
    """The chain projection's tree work: stored subtrees as they form, and signed notes."""

    def __init__(self, tables: Mapping[str, str], records_notes: bool) -> None:
        self.tables = tables  # logical name -> table: "log_links", "log_nodes"
        # Set by the composition root; None: the tree is kept but nothing is signed.
        self.signer: CheckpointSigner | None = None
        self.every_events = 1000
        self.every_seconds = 60.0
        self.records_notes = records_notes
        self.nodes: list[tuple[int, int, str]] = []  # formed this batch, not yet written
        self._last_signed_at = time.monotonic()

    def load(self, cur: Cursor, size: int) -> CompactRange:
        """The right edge of the tree of `size` leaves, read back from the store."""
        edge = range_nodes(0, size)
        found = read_nodes(cur, self.tables, edge)
        return CompactRange(size, [found[n] for n in edge])

    def signed_size(self, cur: Cursor) -> int:
        cur.execute(f"SELECT MAX(size) AS size FROM {NOTES_TABLE}")
        row = cur.fetchone()
        return int(row["size"]) if row and row["size"] is not None else 0

    def write(self, cur: Cursor) -> None:
        if self.nodes:
            cur.executemany(
                f"INSERT INTO {self.tables['log_nodes']} (level, idx, hash) VALUES (?,?,?)",
                self.nodes,
            )
        self.nodes = []

    def wants_note(self, unsigned: int) -> bool:
        """Whether a batch that leaves `unsigned` leaves past the last note should sign."""
        if not self.records_notes or self.signer is None or unsigned <= 0:
            return False
        return unsigned >= self.every_events or (
            time.monotonic() - self._last_signed_at >= self.every_seconds
        )

    def sign(self, cur: Cursor, tree: CompactRange, position: int) -> None:
        assert self.signer is not None
        size, root = tree.size, tree.root()
        insert_note(cur, size, position, root, self.signer(size, root))
        self._last_signed_at = time.monotonic()

    def sign_head(self, store: ReadStore) -> int | None:
        """Sign the tree's current size if no note covers it yet; the size signed."""
        if self.signer is None or not self.records_notes:
            return None
        with store.transaction() as cur:
            cur.execute(
                f"SELECT position, seq FROM {self.tables['log_links']} "
                "ORDER BY position DESC LIMIT 1"
            )
            row = cur.fetchone()
            if row is None or int(row["seq"]) <= self.signed_size(cur):
                return None
            tree = self.load(cur, int(row["seq"]))
            self.sign(cur, tree, int(row["position"]))
            return tree.size


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


def _runs(indexes: Iterable[int]) -> list[tuple[int, int]]:
    """Sorted indexes as inclusive runs of consecutive ones: a proof's parts are runs."""
    runs: list[tuple[int, int]] = []
    for i in sorted(indexes):
        if runs and runs[-1][1] == i - 1:
            runs[-1] = (runs[-1][0], i)
        else:
            runs.append((i, i))
    return runs


def read_stored_nodes(
    source: Cursor | ReadStore, tables: Mapping[str, str], nodes: Iterable[Node]
) -> dict[Node, bytes]:
    """The hashes of stored subtrees: one range read of leaves, one of the levels above."""
    reader = _Reader(source)
    by_level: dict[int, set[int]] = {}
    for level, index in nodes:
        by_level.setdefault(level, set()).add(index)
    found: dict[Node, bytes] = {}
    leaves = _runs(by_level.pop(0, ()))
    if leaves:
        # Leaf index i is the event of seq i + 1 (the chain's unique seq index).
        where = " OR ".join("seq BETWEEN ? AND ?" for _ in leaves)
        params = [v + 1 for run in leaves for v in run]
        for r in reader.query(f"SELECT seq, leaf FROM {tables['log_links']} WHERE {where}", params):
            found[(0, int(r["seq"]) - 1)] = bytes.fromhex(r["leaf"])
    upper = [(level, run) for level, idx in sorted(by_level.items()) for run in _runs(idx)]
    if upper:
        where = " OR ".join("(level = ? AND idx BETWEEN ? AND ?)" for _ in upper)
        params = [v for level, (lo, hi) in upper for v in (level, lo, hi)]
        for r in reader.query(
            f"SELECT level, idx, hash FROM {tables['log_nodes']} WHERE {where}", params
        ):
            found[(int(r["level"]), int(r["idx"]))] = bytes.fromhex(r["hash"])
    wanted = {(level, i) for level, idx in by_level.items() for i in idx}
    wanted |= {(0, i) for lo, hi in leaves for i in range(lo, hi + 1)}
    missing = wanted - found.keys()
    if missing:
        raise LookupError(f"the Merkle read model lacks subtrees {sorted(missing)[:3]}")
    return found


def read_nodes(
    source: Cursor | ReadStore, tables: Mapping[str, str], nodes: Iterable[Node]
) -> Mapping[Node, bytes]:
    """The hashes of any complete subtrees, derived from the stored ones (one read each)."""
    return from_stored(lambda stored: read_stored_nodes(source, tables, stored))(nodes)


def live_tables() -> dict[str, str]:
    return {"log_links": LINKS_TABLE, "log_nodes": NODES_TABLE}


def keeper_of(projections: Iterable[object]) -> TreeKeeper | None:
    """The live tree's keeper among the projections (the chain projection holds it)."""
    for projection in projections:
        keeper = getattr(projection, "tree", None)
        if isinstance(keeper, TreeKeeper):
            return keeper
    return None


def attach_note_signer(
    projections: Iterable[object],
    signer: CheckpointSigner | None,
    every_events: int,
    every_seconds: float,
) -> None:
    """Give the live tree the note key's signer and when to sign."""
    keeper = keeper_of(projections)
    if keeper is not None:
        keeper.signer = signer
        keeper.every_events = every_events
        keeper.every_seconds = every_seconds


def sign_log_head(projections: Iterable[object], store: ReadStore) -> int | None:
    """Sign the live tree's head if unsigned (never fails a job or a shutdown)."""
    keeper = keeper_of(projections)
    if keeper is None:
        return None
    try:
        return keeper.sign_head(store)
    except Exception as exc:  # noqa: BLE001 - the next batch or job signs instead
        log.warning("no signed checkpoint recorded: %s: %s", type(exc).__name__, exc)
        return None


def rows_through(
    store: ReadStore, table: str, upto: int, batch: int, columns: str = "*"
) -> Iterator[dict[str, Any]]:
    """A per-event table's rows at or below a position, in log order, read in pages."""
    after = 0
    while True:
        rows = store.query(
            f"SELECT {columns} FROM {table} WHERE position > ? AND position <= ? "
            "ORDER BY position LIMIT ?",
            (after, upto, batch),
        )
        yield from rows
        if len(rows) < batch:
            return
        after = int(rows[-1]["position"])


def recorded_leaves(store: ReadStore, upto: int, batch: int = 10_000) -> Iterator[RecordedLeaf]:
    """The live tree's leaves at or below a position, in log order, read in pages."""
    for r in rows_through(store, LINKS_TABLE, upto, batch, "position, seq, leaf"):
        yield RecordedLeaf(int(r["seq"]) - 1, int(r["position"]), bytes.fromhex(r["leaf"]))


def leaf_at(store: ReadStore, position: int) -> tuple[int, bytes] | None:
    """The leaf index and leaf hash recorded for the event at a position, if any."""
    row = store.query_one(f"SELECT seq, leaf FROM {LINKS_TABLE} WHERE position = ?", (position,))
    return None if row is None else (int(row["seq"]) - 1, bytes.fromhex(row["leaf"]))


def signed_notes(store: ReadStore) -> list[tuple[int, int, str]]:
    """Every signed checkpoint in the ledger as (size, position, note), oldest first."""
    rows = store.query(f"SELECT size, position, note FROM {NOTES_TABLE} ORDER BY size")
    return [(int(r["size"]), int(r["position"]), str(r["note"])) for r in rows]


def tree_size(store: ReadStore) -> int:
    """How many leaves the live tree holds (one per chained event)."""
    row = store.query_one(f"SELECT MAX(seq) AS seq FROM {LINKS_TABLE}")
    return 0 if row is None or row["seq"] is None else int(row["seq"])


def migrate_former_layout(cur: Cursor, links_table: str, nodes_table: str, chain: str) -> None:
    """Upgrade the former layout (a leaf row per event in `rm_log_leaves`, a node row for
    every level, kept by a `log_tree` projection of its own) to this one, in place.

    In place keeps the links and leaves as they were recorded on arrival, which a rebuild
    from the log (perhaps altered since) would not. Only possible when both projections
    had reached the same position; otherwise the links table is left without its `leaf`
    column and the runner rebuilds the chain and tree from the log (`added_columns`).
    """
    if not cur.columns(FORMER_LEAVES_TABLE):
        return
    cur.execute(
        "SELECT name, position FROM projection_tracking WHERE name IN (?, ?)",
        (chain, FORMER_TRACKING),
    )
    positions = {str(r["name"]): int(r["position"]) for r in cur.fetchall()}
    links = cur.columns(links_table)
    if links and "leaf" not in links and positions.get(chain) == positions.get(FORMER_TRACKING):
        cur.execute(
            f"SELECT (SELECT COUNT(*) FROM {links_table}) AS links, "
            f"(SELECT COUNT(*) FROM {FORMER_LEAVES_TABLE}) AS leaves"
        )
        counts = cur.fetchone()
        in_place = counts is not None and counts["links"] == counts["leaves"]
    else:
        in_place = False
    if in_place:
        log.warning("moving the Merkle tree's leaves beside the chain's links (one-off)")
        cur.execute(f"ALTER TABLE {links_table} ADD COLUMN leaf TEXT")
        cur.execute(
            f"UPDATE {links_table} SET leaf = (SELECT hash FROM {FORMER_LEAVES_TABLE} l "
            f"WHERE l.position = {links_table}.position)"
        )
        cur.execute(f"DELETE FROM {nodes_table} WHERE level % ? <> 0", (STRIDE,))
    cur.drop(FORMER_LEAVES_TABLE)
    cur.execute("DELETE FROM projection_tracking WHERE name = ?", (FORMER_TRACKING,))
