"""The ledger of witnesses' cosignatures on the log's signed checkpoints.

Like `log_notes`, a ledger outside the rebuildable read models: one row per (tree size,
witness key name), the C2SP cosignature line the witness answered. A witness's latest
row is the size the next submission proves consistency from. A row is never replaced:
a second replica's cosignature of the same size by the same witness is dropped.
"""

from __future__ import annotations

from datetime import UTC, datetime

from projections.store import ReadStore

COSIGNATURES_TABLE = "log_cosignatures"

COSIGNATURES_DDL = (
    f"CREATE TABLE IF NOT EXISTS {COSIGNATURES_TABLE} (size BIGINT NOT NULL, "
    "witness TEXT NOT NULL, line TEXT NOT NULL, recorded_at TEXT NOT NULL, "
    "PRIMARY KEY (size, witness))"
)


def record_cosignature(store: ReadStore, size: int, witness: str, line: str) -> None:
    recorded_at = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    with store.transaction() as cur:
        cur.execute(
            f"INSERT INTO {COSIGNATURES_TABLE} (size, witness, line, recorded_at) "
            "VALUES (?,?,?,?) ON CONFLICT (size, witness) DO NOTHING",
            (size, witness, line, recorded_at),
        )


def cosigned_size(store: ReadStore, witness: str) -> int:
    """The largest tree size this witness cosigned (0: none)."""
    row = store.query_one(
        f"SELECT MAX(size) AS size FROM {COSIGNATURES_TABLE} WHERE witness = ?", (witness,)
    )
    return 0 if row is None or row["size"] is None else int(row["size"])


def cosignature_lines(store: ReadStore, size: int) -> list[str]:
    """The cosignature lines of the checkpoint of this size, by witness name."""
    rows = store.query(
        f"SELECT line FROM {COSIGNATURES_TABLE} WHERE size = ? ORDER BY witness", (size,)
    )
    return [str(r["line"]) for r in rows]


def all_cosignatures(store: ReadStore) -> list[tuple[int, str, str]]:
    """Every recorded cosignature as (size, witness, line), oldest first."""
    rows = store.query(f"SELECT size, witness, line FROM {COSIGNATURES_TABLE} ORDER BY size")
    return [(int(r["size"]), str(r["witness"]), str(r["line"])) for r in rows]
