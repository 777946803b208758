"""Follows the notification log and applies it to read models, exactly once, in batches.

Rows and tracking positions are written in one transaction. The tracking rows are
locked (SQLite: the write lock; PostgreSQL: FOR UPDATE) and re-read inside that
transaction, so several runners (replicas, workers) can follow one log safely:
an event already applied by another process is skipped, never applied twice.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Protocol

from eventsourcing.persistence import Notification

from domain.application import Tachograph
from domain.event_versions import upcast_state
from projections.base import Envelope, Projection
from projections.store import Cursor, ReadStore

log = logging.getLogger(__name__)

# How many events a runner applies between its vacuums of the churned tables (see
# `Projection.churned`). With autovacuum off, or between its runs a minute apart, a
# capped table kept every deleted row: on PostgreSQL the capping DELETE of a session
# with 150,000 of them took 26 ms, and the database's CPU per ingested event doubled
# within 150,000 events. A vacuum of 5,000 deleted rows takes a few milliseconds.
VACUUM_EVERY_EVENTS = 5000

TRACKING_DDL = (
    "CREATE TABLE IF NOT EXISTS projection_tracking "
    "(name TEXT PRIMARY KEY, position BIGINT NOT NULL)"
)


def decode(app: Tachograph, notification: Notification) -> Envelope:
    """Decode a stored notification into an Envelope (no aggregate reconstruction)."""
    data = upcast_state(notification.topic, app.mapper.transcoder.decode(notification.state))
    return Envelope(
        position=notification.id,
        aggregate_id=notification.originator_id,  # type: ignore[arg-type]
        version=notification.originator_version,
        type=notification.topic,
        data=data,
        state=notification.state,
    )


def ensure_tracking_row(cur: Cursor, name: str, *, reset: bool = False) -> None:
    """Create a tracking row at position 0 (or move it back there for a rebuild)."""
    action = "UPDATE SET position = 0" if reset else "NOTHING"
    cur.execute(
        f"INSERT INTO projection_tracking (name, position) VALUES (?, 0) "
        f"ON CONFLICT (name) DO {action}",
        (name,),
    )


def ensure_schema(store: ReadStore, projections: Iterable[Projection]) -> None:
    """Create read-model and tracking tables (idempotent); a projection whose live tables
    predate one of its `added_columns` starts again from nothing, and the runner rebuilds
    it from the log."""
    projections = list(projections)
    with store.transaction() as cur:
        for projection in projections:
            projection.upgrade(cur)
        outdated = {p.name for p in projections if _lacks_added_columns(cur, p)}
        for projection in projections:
            if projection.name in outdated:
                log.warning(
                    "read model %r lacks a column it now keeps: rebuilding it from the log",
                    projection.name,
                )
                for table in projection.t.values():
                    cur.drop(table)
        for stmt in [TRACKING_DDL, *(s for p in projections for s in p.ddl())]:
            # On PostgreSQL `CREATE INDEX IF NOT EXISTS` locks its table even when the
            # index exists; holding such locks deadlocks with a running replica's
            # projection batch (seen starting a second worker under load). Existing
            # objects are therefore skipped, not re-declared.
            if store.dialect == "postgres" and _exists(cur, stmt):
                continue
            cur.create(stmt)
        for projection in projections:
            ensure_tracking_row(cur, projection.name, reset=projection.name in outdated)


def _lacks_added_columns(cur: Cursor, projection: Projection) -> bool:
    """Whether a table of the projection exists without a column it has since gained."""
    for logical, added in projection.added_columns.items():
        present = cur.columns(projection.t[logical])
        if present and not present.issuperset(added):
            return True
    return False


_DDL_OBJECT = re.compile(
    r"\s*CREATE\s+(?:UNIQUE\s+)?(?:TABLE|INDEX)\s+IF\s+NOT\s+EXISTS\s+(\w+)", re.I
)


def _exists(cur: Cursor, stmt: str) -> bool:
    """Whether the table or index a DDL statement declares exists (PostgreSQL)."""
    match = _DDL_OBJECT.match(stmt)
    if match is None:
        return False
    cur.execute("SELECT to_regclass(?) IS NOT NULL AS found", (match.group(1),))
    row = cur.fetchone()
    return bool(row and row["found"])


def apply_batch(
    store: ReadStore,
    projections: Sequence[Projection],
    envelopes: Sequence[Envelope],
    tracking_names: dict[str, str] | None = None,
) -> dict[str, int]:
    """Apply envelopes beyond each projection's tracked position; one transaction."""
    names = tracking_names or {p.name: p.name for p in projections}
    # Rows locked in name order: two runners locking them in scan order deadlocked.
    lock = " ORDER BY name FOR UPDATE" if store.dialect == "postgres" else ""
    with store.transaction() as cur:
        placeholders = ",".join("?" * len(names))
        cur.execute(
            f"SELECT name, position FROM projection_tracking WHERE name IN ({placeholders}){lock}",
            list(names.values()),
        )
        tracked = {row["name"]: int(row["position"]) for row in cur.fetchall()}
        positions = {p.name: tracked[names[p.name]] for p in projections}
        last = envelopes[-1].position if envelopes else 0
        for projection in projections:
            projection.begin_batch(cur)
        one_by_one = [p for p in projections if not p.applies_in_bulk]
        # Which handlers read each type, worked out once per type, not per event.
        readers: dict[str, list[tuple[int, Callable[[Cursor, Envelope], None]]]] = {}
        for envelope in envelopes:
            wanted = readers.get(envelope.type)
            if wanted is None:
                wanted = readers[envelope.type] = [
                    (positions[p.name], p.handler(envelope.type))
                    for p in one_by_one
                    if p.reads(envelope.type)
                ]
            for after, handler in wanted:
                if envelope.position > after:
                    handler(cur, envelope)
        for projection in projections:
            if projection.applies_in_bulk:
                after = positions[projection.name]
                projection.apply_all(
                    cur, [e for e in envelopes if e.position > after and projection.reads(e.type)]
                )
        behind = []
        for projection in projections:
            projection.end_batch(cur)
            if last > positions[projection.name]:
                behind.append(names[projection.name])
                positions[projection.name] = last
        if behind:
            cur.execute(
                "UPDATE projection_tracking SET position = ? "
                f"WHERE name IN ({','.join('?' * len(behind))})",
                (last, *behind),
            )
    return positions


class Elsewhere(Protocol):
    """Another process applying the log for this runner (cli/projections_process.py)."""

    def start(self) -> None: ...

    def stop(self) -> None: ...

    def wake(self, hurry: bool) -> None: ...


class ProjectionRunner:
    """A thread applying the log to every live projection; waiters get woken per commit.

    Or, delegated, the handle on another process that applies it: the positions that
    process reports are what `position` and `wait_for` go by (see `delegate`).
    """

    def __init__(
        self,
        app: Tachograph,
        store: ReadStore,
        projections: Sequence[Projection],
        *,
        batch_size: int = 500,
        poll_interval: float = 0.05,
        linger: float = 0.02,
        commit_linger: float = 0.0,
    ) -> None:
        self.app = app
        self.store = store
        self.projections = list(projections)
        self.batch_size = batch_size
        self.poll_interval = poll_interval
        self.linger = linger
        # After an in-process commit wakes the runner, it yields this long (unless a
        # reader hurries it) before applying, so the committing requests answer first.
        self.commit_linger = commit_linger
        self._cond = threading.Condition()
        self._wake = threading.Event()
        self._hurry = threading.Event()  # a reader waits for a position: stop lingering
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._position = 0
        self.last_error: str | None = None
        # Notifications this process appended, by position: the runner applies them
        # without reading them back from the log (see `offer`).
        self._offered: dict[int, Notification] = {}
        self._offered_lock = threading.Lock()
        self._elsewhere: Elsewhere | None = None
        # Told each new position once the batch that reached it has committed.
        self.on_advance: Callable[[int], None] | None = None
        self.vacuum_every = VACUUM_EVERY_EVENTS
        self._since_vacuum = 0

    @property
    def position(self) -> int:
        """Lowest position every live projection has processed."""
        return self._position

    @property
    def native_thread_id(self) -> int | None:
        """The OS id of the runner's thread while it runs (for CPU placement)."""
        thread = self._thread
        return thread.native_id if thread is not None else None

    def positions(self) -> dict[str, int]:
        """Tracked position per projection, read from the store."""
        rows = self.store.query("SELECT name, position FROM projection_tracking")
        wanted = {p.name for p in self.projections}
        return {r["name"]: int(r["position"]) for r in rows if r["name"] in wanted}

    def delegate(self, elsewhere: Elsewhere) -> None:
        """Let another process apply the log: `start` and `stop` start and stop it, a
        commit or a waiting reader wakes it, and it brings its positions back through
        `report`. Before `start`."""
        self._elsewhere = elsewhere

    def report(self, position: int, error: str | None) -> None:
        """What the process applying the log for this one says it has reached."""
        self.last_error = error
        self._advance(position)

    def start(self) -> None:
        """Start following the log in a daemon thread (idempotent)."""
        if self._thread is not None:
            return
        self._advance(min(self.positions().values(), default=0))
        if self._elsewhere is not None:
            self._elsewhere.start()
            return
        self._stopping.clear()
        self._thread = threading.Thread(target=self._loop, name="projections", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop after the batch in progress commits."""
        if self._elsewhere is not None:
            self._elsewhere.stop()
            # Where it left the read models: a shutdown checkpoint goes on from there.
            self._advance(min(self.positions().values(), default=0))
            return
        self._stopping.set()
        self._hurry.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None

    def wake(self, position: int | None = None) -> None:
        """Tell the runner the log grew (called right after an in-process commit)."""
        if self._elsewhere is not None:
            self._elsewhere.wake(hurry=False)
        self._wake.set()

    def hurry(self) -> None:
        """A reader waits for a position: apply now, without lingering."""
        self._hurry.set()
        self._wake.set()

    def offer(self, notifications: Iterable[Notification]) -> None:
        """Hand over notifications this process has just durably appended.

        The next batch starting right after the runner's position takes the unbroken
        run of offered positions that follows it instead of reading the log; anything
        else (a gap: another process's events, a rolled-back id) is read from the log
        as before, so what is applied, and in which order, is the same either way.
        Bounded: while the runner lags far behind, offers are dropped and read later.
        Delegated, they are not kept: the other process reads the log.
        """
        if self._elsewhere is not None:
            return
        with self._offered_lock:
            room = self._OFFER_LIMIT - len(self._offered)
            for notification in notifications:
                if room <= 0:
                    break
                self._offered[notification.id] = notification
                room -= 1

    _OFFER_LIMIT = 4096

    def run_once(self) -> int:
        """Apply one batch; return the number of notifications read."""
        notifications = self._take_offered() or self.app.recorder.select_notifications(
            start=self._position, limit=self.batch_size, inclusive_of_start=False
        )
        if not notifications:
            # Another process may have applied events past ours; pick its position up.
            self._advance(min(self.positions().values(), default=0))
            return 0
        envelopes = [decode(self.app, n) for n in notifications]
        positions = apply_batch(self.store, self.projections, envelopes)
        self._advance(min(positions.values(), default=0))
        self._since_vacuum += len(notifications)
        if self._since_vacuum >= self.vacuum_every:
            self._since_vacuum = 0
            self._vacuum()
        return len(notifications)

    def _vacuum(self) -> None:
        """Vacuum the churned tables; a failure is logged, never the batch's (it is in)."""
        tables = [p.t[name] for p in self.projections for name in p.churned]
        try:
            self.store.vacuum(tables)
        except Exception:  # noqa: BLE001 - the next round tries again
            log.warning("vacuum of %s failed", ", ".join(tables), exc_info=True)

    def _take_offered(self) -> list[Notification]:
        """The offered run of positions right after the runner's; forgets older ones."""
        with self._offered_lock:
            offered = self._offered
            if not offered:
                return []
            run: list[Notification] = []
            position = self._position + 1
            while len(run) < self.batch_size:
                notification = offered.pop(position, None)
                if notification is None:
                    break
                run.append(notification)
                position += 1
            if not run:
                # Applied from the log meanwhile (or another process's turn): drop those.
                for stale in [p for p in offered if p <= self._position]:
                    del offered[stale]
            return run

    def catch_up(self) -> None:
        """Apply everything in the log now (used at start and by tests)."""
        self._advance(min(self.positions().values(), default=0))
        while self.run_once():
            pass

    def wait_for(self, position: int, timeout: float) -> bool:
        """Block until every live projection has processed `position`."""
        if self._position >= position:
            return True
        deadline = time.monotonic() + timeout
        if self._elsewhere is not None:
            self._elsewhere.wake(hurry=True)
        self.hurry()
        with self._cond:
            while self._position < position:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._cond.wait(remaining)
        return True

    def _advance(self, position: int) -> None:
        with self._cond:
            if position <= self._position:
                return
            self._position = position
            self._cond.notify_all()
        if self.on_advance is not None:
            self.on_advance(position)

    def _loop(self) -> None:
        backoff = 0.05
        while not self._stopping.is_set():
            try:
                read = self.run_once()
                self.last_error = None
                backoff = 0.05
            except Exception as exc:  # noqa: BLE001 - the runner must outlive faults
                # Never skip: an event that cannot be applied stalls the runner (health
                # shows the lag) and is retried, because skipping would corrupt read models.
                first = self.last_error is None
                self.last_error = f"{type(exc).__name__}: {exc}"
                # Full traceback once per fault, not on every retry of an outage.
                log.warning(
                    "projection batch failed; retrying: %s", self.last_error, exc_info=first
                )
                self._stopping.wait(backoff)
                backoff = min(backoff * 2, 5.0)
                continue
            if read > 1 and self.linger:
                # Events are arriving concurrently: let more gather so the next
                # transaction's fixed cost (~2 ms here) is shared. A lone event never
                # waits here, and neither does a reader waiting for a position.
                self._hurry.wait(self.linger)
                self._hurry.clear()
            elif read < self.batch_size:
                woken = self._wake.wait(self.poll_interval)
                self._wake.clear()
                if woken and self.commit_linger:
                    # The runner and the requests a commit answers want the interpreter
                    # lock at the same moment; applying first delayed their answers.
                    # A commit's signal, not the HTTP layer's: any writer wakes it.
                    self._hurry.wait(self.commit_linger)
                    self._hurry.clear()
