"""Log checkpoints read model: the hash chain's link and Merkle leaf per event, the tree's
stored subtrees, and the ledgers of HMAC checkpoints and signed notes.

`rm_log_links` holds one row per event (position, seq, aggregate, version, type, link,
leaf), written in the runner's batch transaction, so it is exactly what the log looked
like when each event arrived. The link and the Merkle leaf are hashed in one loop (the
header is encoded once, in the envelope; the payload is hashed for each, since what
precedes it differs); the tree's subtrees above the leaves go to `rm_log_nodes`
(projections/log_tree.py). One projection keeps both, so the
tree needs no per-event row, no head of its own and no second tracking position. Both
tables are a pure function of the log: a rebuild equals them unless the log was altered
afterwards (then the drift names the altered positions).

`log_checkpoints` is a ledger, deliberately outside the projection's rebuildable
tables: a checkpoint records what the chain *was*, so a rebuild, a replay or a swap
never writes or rewrites one. The live projection appends a checkpoint in the same
transaction as every 1,000th link; processes append one at shutdown. Signed notes of
the tree go to `log_notes` likewise (projections/log_tree.py).
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from hashlib import sha256
from typing import Any

from domain.log_chain import (
    CHECKPOINT_INTERVAL,
    GENESIS,
    PERIODIC,
    SHUTDOWN,
    Checkpoint,
    next_link,
)
from domain.log_verify import RecordedLink
from domain.merkle import CompactRange
from projections.base import Envelope, Projection
from projections.log_cosignatures import COSIGNATURES_DDL
from projections.log_tree import (
    NODES_DDL,
    NOTES_DDL,
    TreeKeeper,
    migrate_former_layout,
    rows_through,
)
from projections.runner import ProjectionRunner
from projections.store import Cursor, ReadStore

log = logging.getLogger(__name__)

LIVE_PREFIX = "rm_"
CHECKPOINTS_TABLE = "log_checkpoints"
LINKS_TABLE = LIVE_PREFIX + "log_links"

_CHECKPOINTS_DDL = (
    f"CREATE TABLE IF NOT EXISTS {CHECKPOINTS_TABLE} (seq BIGINT PRIMARY KEY, "
    "position BIGINT NOT NULL, link TEXT NOT NULL, kind TEXT NOT NULL, key_id TEXT, "
    "signature TEXT, recorded_at TEXT NOT NULL)"
)


@dataclass(slots=True)
class _Head:
    """The chain's and tree's end; advanced in place as events are linked."""

    position: int
    seq: int
    link: str
    tree: CompactRange
    signed_size: int  # a lower bound: re-read before a note is signed


class LogChainProjection(Projection):
    """Chains every event (whatever its type) and checkpoints the chain every 1,000 events."""

    name = "log_checkpoints"
    tables = {
        "log_links": [
            "CREATE TABLE IF NOT EXISTS {t} (position BIGINT PRIMARY KEY, seq BIGINT NOT NULL, "
            "aggregate_id TEXT NOT NULL, version BIGINT NOT NULL, type TEXT NOT NULL, "
            "link TEXT NOT NULL, leaf TEXT NOT NULL)",
            # Also how the tree reads leaves: leaf index = seq - 1.
            "CREATE UNIQUE INDEX IF NOT EXISTS {t}_seq ON {t} (seq)",
            # The ledgers are created beside the links but are none of the projection's
            # tables, so rebuilds never drop, compare or swap them.
            _CHECKPOINTS_DDL,
            NOTES_DDL,
            COSIGNATURES_DDL,
        ],
        "log_nodes": [NODES_DDL],
    }
    # The leaf joined the links when the tree's own per-event table went away; a live
    # table without it that `upgrade` could not fill in place is rebuilt from the log.
    added_columns = {"log_links": ("leaf",)}
    # No index on (aggregate_id, version): ids are random, so each event's entry landed on
    # a random page of it, and that index was a tenth of the projections process's time
    # per event (docs/performance.md). Only the diagnosis of a broken chain asks by key,
    # once, and scans (`recorded_position`).
    # A rebuild over an altered log must never replace the chain recorded on arrival:
    # `replay --swap` refuses to swap this projection unless it equals the live one.
    swap_requires_equal = True

    def __init__(self, prefix: str = LIVE_PREFIX) -> None:
        super().__init__(prefix)
        # Set by the composition root from TACHOGRAPH_LOG_SIGNING_KEY; None records unsigned.
        self.signing_key: str | None = None
        # Only the live chain appends to the ledger; a rebuild's chain is for comparison.
        self.records_checkpoints = prefix == LIVE_PREFIX
        self.tree = TreeKeeper(self.t, records_notes=prefix == LIVE_PREFIX)
        self._head: tuple[weakref.ref[Cursor], _Head] | None = None
        # The head as the last batch left it, reused by the next if still the store's.
        self._last: _Head | None = None
        # Links of the current transaction not yet written (see end_batch).
        self._links: list[tuple[int, int, str, int, str, str, str]] = []

    # Reads no other projection's rows and no other projection reads its rows mid-batch.
    applies_in_bulk = True

    def reads(self, event_type: str) -> bool:
        return True  # every event type, so the chain covers the whole log

    def upgrade(self, cur: Cursor) -> None:
        if self.prefix == LIVE_PREFIX:
            migrate_former_layout(cur, self.t["log_links"], self.t["log_nodes"], self.name)
        # The by-key index earlier releases kept (see above). Once it is gone the
        # statement only looks its name up: no table is locked, on either store.
        cur.execute(f"DROP INDEX IF EXISTS {self.t['log_links']}_key")

    def begin_batch(self, cur: Cursor) -> None:
        self._links = []
        self.tree.nodes = []

    def apply(self, cur: Cursor, envelope: Envelope) -> None:
        """Append the event's link; the rows are written together at the end of the batch."""
        self.apply_all(cur, [envelope])

    def apply_all(self, cur: Cursor, envelopes: Sequence[Envelope]) -> None:
        """`apply` for each envelope in order, in one loop: every event passes here."""
        head = self._current_head(cur)
        position, seq, link = head.position, head.seq, head.link
        links, nodes, add = self._links, self.tree.nodes, head.tree.append_stored
        checkpoints = self.records_checkpoints
        for e in envelopes:
            if e.position <= position:
                continue
            link = next_link(link, e.head, e.state)
            digest = sha256(b"\x00" + e.head)  # leaf_hash(event_leaf(...)), no copies
            digest.update(e.state)
            leaf = digest.digest()
            for (level, index), h in add(leaf):
                nodes.append((level, index, h.hex()))
            seq += 1
            position = e.position
            links.append((position, seq, e.key, e.version, e.type, link, leaf.hex()))
            if checkpoints and seq % CHECKPOINT_INTERVAL == 0:
                checkpoint = Checkpoint(seq, position, link, PERIODIC, recorded_at=_now())
                insert_checkpoint(cur, checkpoint.signed(self.signing_key))
        head.position, head.seq, head.link = position, seq, link

    def end_batch(self, cur: Cursor) -> None:
        if self._links:
            cur.executemany(
                f"INSERT INTO {self.t['log_links']} (position, seq, aggregate_id, version, "
                "type, link, leaf) VALUES (?,?,?,?,?,?,?)",
                self._links,
            )
            self.tree.write(cur)
            head = self._current_head(cur)
            if self.tree.wants_note(head.seq - head.signed_size):
                # The cached size is a lower bound (another replica may have signed).
                head.signed_size = self.tree.signed_size(cur)
                if self.tree.wants_note(head.seq - head.signed_size):
                    self.tree.sign(cur, head.tree, head.position)
                    head.signed_size = head.seq
        self._links = []
        if self._head is not None and self._head[0]() is cur:
            self._last = self._head[1]  # what this transaction leaves, if it commits

    def _current_head(self, cur: Cursor) -> _Head:
        # The head is cached for the transaction that produced it (one cursor per
        # transaction). The next transaction reads the store's last link: another process
        # may have extended the chain between our batches, and a rolled-back batch must
        # not leave a head that was never committed. Only when that row is still the one
        # our last batch ended on is its tree edge reused; the link commits to the whole
        # log before it, so the edge it ended with is still the tree's.
        if self._head is not None and self._head[0]() is cur:
            return self._head[1]
        cur.execute(
            f"SELECT position, seq, link FROM {self.t['log_links']} ORDER BY position DESC LIMIT 1"
        )
        row = cur.fetchone()
        position, seq, link = (
            (0, 0, GENESIS)
            if row is None
            else (int(row["position"]), int(row["seq"]), str(row["link"]))
        )
        last = self._last
        if last is not None and (last.position, last.seq, last.link) == (position, seq, link):
            head = last
        else:
            head = _Head(position, seq, link, self.tree.load(cur, seq), 0)
            head.signed_size = self.tree.signed_size(cur) if self.tree.records_notes else 0
        self._last = None  # until this transaction's batch is written
        self._head = (weakref.ref(cur), head)
        return head


def links_at(store: ReadStore, positions: Sequence[int]) -> dict[int, str]:
    """The chain link recorded at each of these positions (one range read); positions the
    chain has not reached yet are missing."""
    if not positions:
        return {}
    wanted = set(positions)
    rows = store.query(
        f"SELECT position, link FROM {LINKS_TABLE} WHERE position BETWEEN ? AND ?",
        (min(wanted), max(wanted)),
    )
    return {int(r["position"]): str(r["link"]) for r in rows if int(r["position"]) in wanted}


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def insert_checkpoint(cur: Cursor, checkpoint: Checkpoint) -> None:
    """Append to the ledger; an existing checkpoint for that seq is never replaced."""
    if checkpoint.signature is None:
        warn_if_unsigned(None)
    cur.execute(
        f"INSERT INTO {CHECKPOINTS_TABLE} (seq, position, link, kind, key_id, signature, "
        "recorded_at) VALUES (?,?,?,?,?,?,?) ON CONFLICT (seq) DO NOTHING",
        (
            checkpoint.seq,
            checkpoint.position,
            checkpoint.link,
            checkpoint.kind,
            checkpoint.key_id,
            checkpoint.signature,
            checkpoint.recorded_at or _now(),
        ),
    )


_warned_unsigned: list[bool] = []


def warn_if_unsigned(key: str | None) -> None:
    """Warn, once per process, that checkpoints are recorded unsigned. `serve` and
    `worker` call it at start-up (recording checkpoints is their job); any other command
    meets it only if it records an unsigned checkpoint itself (`insert_checkpoint`)."""
    if key is None and not _warned_unsigned:
        _warned_unsigned.append(True)
        log.warning(
            "TACHOGRAPH_LOG_SIGNING_KEY is unset: log checkpoints are recorded "
            "unsigned, so they prove nothing against someone who can rewrite the "
            "database; set it (kept outside the database) in every process"
        )


def attach_signing_key(projections: Iterable[Projection], key: str | None) -> None:
    """Give the live chain projection the key its checkpoints are signed with."""
    for projection in projections:
        if isinstance(projection, LogChainProjection):
            projection.signing_key = key


def _checkpoint(row: dict[str, Any]) -> Checkpoint:
    return Checkpoint(
        seq=int(row["seq"]),
        position=int(row["position"]),
        link=str(row["link"]),
        kind=str(row["kind"]),
        key_id=row["key_id"],
        signature=row["signature"],
        recorded_at=row["recorded_at"],
    )


def list_checkpoints(
    store: ReadStore, limit: int, before_seq: int | None = None
) -> list[Checkpoint]:
    """Checkpoints, newest first."""
    sql = f"SELECT * FROM {CHECKPOINTS_TABLE}"
    params: list[Any] = []
    if before_seq is not None:
        sql += " WHERE seq < ?"
        params.append(before_seq)
    sql += " ORDER BY seq DESC LIMIT ?"
    params.append(limit)
    return [_checkpoint(r) for r in store.query(sql, params)]


def all_checkpoints(store: ReadStore, upto: int | None = None) -> list[Checkpoint]:
    """Every checkpoint (at or below a position), oldest first."""
    sql = f"SELECT * FROM {CHECKPOINTS_TABLE}"
    params: list[Any] = []
    if upto is not None:
        sql += " WHERE position <= ?"
        params.append(upto)
    return [_checkpoint(r) for r in store.query(sql + " ORDER BY seq", params)]


def recorded_links(store: ReadStore, upto: int, batch: int = 10_000) -> Iterator[RecordedLink]:
    """The live chain's links at or below a position, in log order, read in pages."""
    # Not the leaf beside each link: `verify` reads every link, and leaves only on a mismatch.
    columns = "position, seq, aggregate_id, version, type, link"
    for r in rows_through(store, LINKS_TABLE, upto, batch, columns):
        yield RecordedLink(
            position=int(r["position"]),
            seq=int(r["seq"]),
            aggregate_id=str(r["aggregate_id"]),
            version=int(r["version"]),
            type=str(r["type"]),
            link=str(r["link"]),
        )


def chained_seq(store: ReadStore, upto: int) -> int:
    """How many events the live chain covers at or below a position."""
    row = store.query_one(f"SELECT MAX(seq) AS seq FROM {LINKS_TABLE} WHERE position <= ?", (upto,))
    return int(row["seq"]) if row and row["seq"] is not None else 0


def recorded_position(store: ReadStore, aggregate_id: str, version: int) -> int | None:
    """Where the live chain recorded one aggregate version, if anywhere.

    A scan of the links: asked once, to name the first break of a chain, it does not
    pay for an index every event would update."""
    row = store.query_one(
        f"SELECT position FROM {LINKS_TABLE} WHERE aggregate_id = ? AND version = ?",
        (aggregate_id, version),
    )
    return int(row["position"]) if row else None


def checkpoint_head(store: ReadStore, key: str | None, kind: str = SHUTDOWN) -> Checkpoint | None:
    """Record a checkpoint at the chain's current head (none when the chain is empty)."""
    with store.transaction() as cur:
        cur.execute(f"SELECT position, seq, link FROM {LINKS_TABLE} ORDER BY position DESC LIMIT 1")
        row = cur.fetchone()
        if row is None:
            return None
        checkpoint = Checkpoint(
            int(row["seq"]), int(row["position"]), str(row["link"]), kind, recorded_at=_now()
        ).signed(key)
        insert_checkpoint(cur, checkpoint)
    return checkpoint


def checkpoint_at_shutdown(runner: ProjectionRunner, max_batches: int = 50) -> None:
    """Chain what is left (bounded), then checkpoint the head; never fails a shutdown."""
    chain = next((p for p in runner.projections if isinstance(p, LogChainProjection)), None)
    if chain is None or not chain.records_checkpoints:
        return
    try:
        for _ in range(max_batches):
            if runner.run_once() < runner.batch_size:
                break
        checkpoint = checkpoint_head(runner.store, chain.signing_key)
    except Exception as exc:  # noqa: BLE001 - shutdown must go on when the store is away
        log.warning("no shutdown checkpoint recorded: %s: %s", type(exc).__name__, exc)
        return
    if checkpoint is not None:
        log.info(
            "log checkpoint at shutdown: seq %d, position %d", checkpoint.seq, checkpoint.position
        )
