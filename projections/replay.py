"""Verified replay: rebuild projections from position 0 beside the live ones, compare them row by
row at one log position, and optionally swap the rebuilt tables in while readers keep reading.

Consistency rules:
- Live and rebuilt rows are compared at the same position: the live side is read in one
  snapshot together with its tracking position, and the rebuilt side is brought to
  exactly that position before it is read.
- A swap runs in one read-store transaction that first locks the live tracking row (the
  lock every projection runner, in any process, takes before applying a batch), brings
  the rebuilt tables to the live position, renames them into place and drops the old
  ones. Readers see the old tables or the new ones, never neither and never empty ones;
  runners resume from the same tracking position, which still describes the rows.
"""

from __future__ import annotations

import hashlib
import json
import secrets
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from domain.application import Tachograph
from projections.base import Projection
from projections.rebuild import drop_tables, rebuild
from projections.runner import ProjectionRunner, apply_batch, decode
from projections.store import Cursor, ReadStore


class ReplayError(Exception):
    """A replay could not run (unknown projection name, store failure)."""


@dataclass
class TableDrift:
    """Row-by-row comparison of one live table with its rebuild."""

    table: str
    live_rows: int
    rebuilt_rows: int
    only_live: list[str] = field(default_factory=list)
    only_rebuilt: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)

    @property
    def equal(self) -> bool:
        return not (self.only_live or self.only_rebuilt or self.changed)

    def as_dict(self) -> dict[str, Any]:
        return {
            "table": self.table,
            "liveRows": self.live_rows,
            "rebuiltRows": self.rebuilt_rows,
            "onlyLive": self.only_live,
            "onlyRebuilt": self.only_rebuilt,
            "changed": self.changed,
        }


@dataclass
class ProjectionReplay:
    """What replaying one projection found, and whether it was swapped in."""

    name: str
    position: int = 0
    tables: list[TableDrift] = field(default_factory=list)
    problem: str | None = None
    swapped: bool = False
    swap_refused: str | None = None

    @property
    def drift(self) -> bool:
        return self.problem is not None or any(not t.equal for t in self.tables)

    def as_dict(self) -> dict[str, Any]:
        return {
            "projection": self.name,
            "position": self.position,
            "drift": self.drift,
            "problem": self.problem,
            "tables": [t.as_dict() for t in self.tables],
            "swapped": self.swapped,
            "swapRefused": self.swap_refused,
        }


def select_projections(live: Sequence[Projection], names: Sequence[str]) -> list[Projection]:
    """The live projections named (all when none are), or ReplayError naming the unknown."""
    if not names:
        return list(live)
    by_name = {p.name: p for p in live}
    unknown = [n for n in names if n not in by_name]
    if unknown:
        raise ReplayError(
            f"Unknown projection {unknown[0]!r}; known: {', '.join(sorted(by_name))}."
        )
    return [by_name[n] for n in dict.fromkeys(names)]


def replay(
    app: Tachograph,
    store: ReadStore,
    live: Sequence[Projection],
    *,
    swap: bool = False,
    batch_size: int = 1000,
    progress: Callable[[int], None] | None = None,
    phase: Callable[[str], None] | None = None,
    max_keys: int = 20,
) -> list[ProjectionReplay]:
    """Rebuild `live` projections into fresh tables, compare, and swap them in if asked."""
    tell = phase or (lambda _: None)
    prefix = f"rp{secrets.token_hex(4)}_"
    fresh = [type(p)(prefix) for p in live]
    tracking = {p.name: f"rebuild:{prefix}{p.name}" for p in fresh}
    swapped: set[str] = set()
    try:
        rebuild(app, store, fresh, progress=progress)
        tell("comparing rebuilt rows with the live tables")
        live_error = _catch_up_live(app, store, live, batch_size)
        reports = []
        for old, new in zip(live, fresh, strict=True):
            report = _compare(app, store, old, new, tracking[new.name], max_keys, batch_size)
            if live_error is not None and report.problem is not None:
                report.problem += f" ({live_error})"
            reports.append(report)
        if swap:
            tell("swapping rebuilt tables in")
            for old, new, report in zip(live, fresh, reports, strict=True):
                if getattr(old, "swap_requires_equal", False) and report.drift:
                    report.swap_refused = (
                        f"{old.name} records what the log looked like on arrival; a rebuild "
                        "that differs from it is evidence, not a fix (run tachograph verify)."
                    )
                    continue
                report.position = _swap_in(app, store, old, new, tracking[new.name], batch_size)
                report.swapped = True
                swapped.add(new.name)
        return reports
    finally:
        _clean_up(store, [p for p in fresh if p.name not in swapped], tracking.values())


def _catch_up_live(
    app: Tachograph, store: ReadStore, live: Sequence[Projection], batch_size: int
) -> str | None:
    # Live tables may lag (no server running, or it is a few events behind): bring them to
    # the head the same way any runner does, so both sides can be compared at one position.
    try:
        ProjectionRunner(app, store, live, batch_size=batch_size).catch_up()
    except Exception as exc:  # noqa: BLE001 - reported as drift: the live side is stuck
        return f"live projection cannot apply the log: {type(exc).__name__}: {exc}"
    return None


@contextmanager
def snapshot(store: ReadStore) -> Iterator[Cursor]:
    """A read transaction whose statements all see one snapshot (several tables at once)."""
    with store.transaction(write=False) as cur:
        if store.dialect == "postgres":
            # READ COMMITTED (the default) takes a new snapshot per statement.
            cur.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        yield cur


def _tracked(cur: Cursor, name: str, lock: bool = False) -> int:
    suffix = " FOR UPDATE" if lock else ""
    cur.execute(f"SELECT position FROM projection_tracking WHERE name = ?{suffix}", (name,))
    row = cur.fetchone()
    return int(row["position"]) if row else 0


def _compare(
    app: Tachograph,
    store: ReadStore,
    live: Projection,
    fresh: Projection,
    tracking: str,
    max_keys: int,
    batch_size: int,
) -> ProjectionReplay:
    report = ProjectionReplay(live.name)
    with snapshot(store) as cur:
        position = _tracked(cur, live.name)
        # Rows are matched by the rebuilt table's key: tables created by an older
        # release may key the same rows differently (hook_audit once had its own id).
        keys = {
            logical: primary_key(cur, store.dialect, table) for logical, table in fresh.t.items()
        }
        live_rows = {
            logical: _row_digests(cur, table, keys[logical]) for logical, table in live.t.items()
        }
    with store.transaction(write=False) as cur:
        rebuilt_at = _tracked(cur, tracking)
    if rebuilt_at > position:
        report.position = position
        report.problem = (
            f"live tables are at position {position}, behind the log the rebuild read "
            f"(position {rebuilt_at}); they could not be compared"
        )
        return report
    _advance(app, store, fresh, tracking, rebuilt_at, position, batch_size)
    report.position = position
    with snapshot(store) as cur:
        for logical, table in fresh.t.items():
            report.tables.append(
                _diff(
                    logical, live_rows[logical], _row_digests(cur, table, keys[logical]), max_keys
                )
            )
    return report


def _advance(
    app: Tachograph,
    store: ReadStore,
    fresh: Projection,
    tracking: str,
    start: int,
    stop: int,
    batch_size: int,
) -> None:
    """Apply (start, stop] to rebuilt tables, each page in its own transaction."""
    while start < stop:
        page = app.recorder.select_notifications(
            start=start, limit=batch_size, stop=stop, inclusive_of_start=False
        )
        if not page:
            return
        apply_batch(store, [fresh], [decode(app, n) for n in page], {fresh.name: tracking})
        start = page[-1].id


def primary_key(cur: Cursor, dialect: str, table: str) -> list[str]:
    """Primary-key columns of a table, in key order (empty when it has none)."""
    if dialect == "sqlite":
        cur.execute(f'PRAGMA table_info("{table}")')
        columns = [r for r in cur.fetchall() if int(r["pk"]) > 0]
        return [str(r["name"]) for r in sorted(columns, key=lambda r: int(r["pk"]))]
    cur.execute(
        "SELECT a.attname AS name FROM pg_index i JOIN pg_attribute a "
        "ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey) "
        "WHERE i.indrelid = to_regclass(?) AND i.indisprimary "
        "ORDER BY array_position(i.indkey::int2[], a.attnum)",
        (table,),
    )
    return [str(r["name"]) for r in cur.fetchall()]


def _normal(value: object) -> object:
    # SQLite hands booleans back as 0/1 and PostgreSQL as bool; compare them alike.
    return int(value) if isinstance(value, bool) else value


def _row_digests(cur: Cursor, table: str, key_columns: list[str]) -> Counter[tuple[str, str]]:
    """(key, row digest) of every row; keyless tables use the digest as key (a multiset)."""
    cur.execute(f"SELECT * FROM {table}")
    digests: Counter[tuple[str, str]] = Counter()
    for row in cur.fetchall():
        canonical = json.dumps({k: _normal(v) for k, v in row.items()}, sort_keys=True, default=str)
        digest = hashlib.sha256(canonical.encode()).hexdigest()
        if key_columns:
            key = ", ".join(f"{c}={row[c]}" for c in key_columns)
        else:
            key = f"row {digest[:12]}"
        digests[(key, digest)] += 1
    return digests


def _diff(
    logical: str,
    live: Counter[tuple[str, str]],
    rebuilt: Counter[tuple[str, str]],
    max_keys: int,
) -> TableDrift:
    live_keys = {key for key, _ in live}
    rebuilt_keys = {key for key, _ in rebuilt}
    changed = sorted({key for key, _ in (live - rebuilt)} & {key for key, _ in (rebuilt - live)})
    return TableDrift(
        table=logical,
        live_rows=sum(live.values()),
        rebuilt_rows=sum(rebuilt.values()),
        only_live=sorted(live_keys - rebuilt_keys)[:max_keys],
        only_rebuilt=sorted(rebuilt_keys - live_keys)[:max_keys],
        changed=changed[:max_keys],
    )


def _swap_in(
    app: Tachograph,
    store: ReadStore,
    live: Projection,
    fresh: Projection,
    tracking: str,
    batch_size: int,
) -> int:
    """Replace the live tables by the rebuilt ones in one transaction; return the position."""
    with store.transaction() as cur:
        # Taking the live tracking row first freezes every runner of this projection, in
        # every process, at one position until the swap commits.
        position = _tracked(cur, live.name, lock=store.dialect == "postgres")
        rebuilt_at = _tracked(cur, tracking)
        start = rebuilt_at
        fresh.begin_batch(cur)
        while start < position:
            page = app.recorder.select_notifications(
                start=start, limit=batch_size, stop=position, inclusive_of_start=False
            )
            if not page:
                break
            for notification in page:
                fresh.apply(cur, decode(app, notification))
            start = page[-1].id
        # Deferred per-batch work belongs to this transaction too.
        fresh.end_batch(cur)
        if rebuilt_at > position:
            # The live side lagged (it could not apply the log): the rebuilt rows are at
            # the later position, so the runners continue from there.
            cur.execute(
                "UPDATE projection_tracking SET position = ? WHERE name = ?",
                (rebuilt_at, live.name),
            )
            position = rebuilt_at
        for logical, live_table in live.t.items():
            retired = f"{fresh.prefix}old_{logical}"
            cur.execute(f"ALTER TABLE {live_table} RENAME TO {retired}")
            cur.execute(f"ALTER TABLE {fresh.t[logical]} RENAME TO {live_table}")
            cur.execute(f"DROP TABLE {retired}")
        _restore_index_names(cur, store.dialect, live, fresh.prefix)
        cur.execute("DELETE FROM projection_tracking WHERE name = ?", (tracking,))
    return position


def _restore_index_names(cur: Cursor, dialect: str, live: Projection, prefix: str) -> None:
    """Give swapped-in tables the index names the live DDL expects (so start-up adds none)."""
    for table in live.t.values():
        if dialect == "postgres":
            cur.execute(
                "SELECT indexname AS name FROM pg_indexes "
                "WHERE schemaname = current_schema() AND tablename = ?",
                (table,),
            )
            for row in cur.fetchall():
                name = str(row["name"])
                if name.startswith(prefix):
                    cur.execute(
                        f'ALTER INDEX "{name}" RENAME TO "{live.prefix}{name[len(prefix) :]}"'
                    )
        else:
            # SQLite cannot rename an index: create the live ones, drop the rebuild's.
            cur.execute(
                "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = ? "
                "AND sql IS NOT NULL",
                (table,),
            )
            stale = [str(r["name"]) for r in cur.fetchall() if str(r["name"]).startswith(prefix)]
            for name in stale:
                cur.execute(f'DROP INDEX "{name}"')
    if dialect != "postgres":
        for stmt in live.ddl():
            cur.create(stmt)


def _clean_up(store: ReadStore, fresh: Sequence[Projection], tracking: Any) -> None:
    for projection in fresh:
        drop_tables(store, projection)
    with store.transaction() as cur:
        for name in tracking:
            cur.execute("DELETE FROM projection_tracking WHERE name = ?", (name,))
