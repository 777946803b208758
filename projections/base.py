"""Projection framework: handlers per event type, table names redirectable for rebuilds."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, ClassVar, TypeVar, overload
from uuid import UUID

from domain.log_chain import canonical_id, chain_header
from projections.store import Cursor

F = TypeVar("F", bound=Callable[..., None])


@dataclass(slots=True)
class Envelope:
    """One decoded notification: what every projection handler receives (read-only).

    Not a frozen dataclass: every event of every catch-up and rebuild is wrapped in
    one, and a frozen dataclass sets each field through `object.__setattr__`.
    """

    position: int
    aggregate_id: UUID
    version: int
    type: str
    data: dict[str, Any]
    # The payload bytes exactly as stored, for projections that hash the log itself.
    state: bytes = field(default=b"", repr=False, compare=False)
    # Formatted once: several projections read these for every event.
    at: str = field(init=False, repr=False, compare=False)
    key: str = field(init=False, repr=False, compare=False)  # the id, canonically spelt
    # The chain header and its newline, encoded: the chain link and the Merkle leaf both
    # hash it before the payload (domain/log_chain.py, domain/merkle.py).
    head: bytes = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.at = stored_iso(self.state) or iso(self.data["timestamp"])
        self.key = key = canonical_id(self.aggregate_id)
        self.head = chain_header(self.position, key, self.version, self.type).encode() + b"\n"


# How the library's JSON transcoder writes an event's timestamp, first in every payload.
_STAMP_PREFIX = b'{"timestamp":{"_type_":"datetime_iso","_data_":"'
_STAMP_END = len(_STAMP_PREFIX) + len("2026-01-01T00:00:00.000000")
_UTC_SUFFIX = b'+00:00"'


def stored_iso(state: bytes) -> str | None:
    """`iso(timestamp)` read straight from the stored payload, or None if not plainly there.

    Parsing the timestamp and formatting it again costs more per event than the rest of
    decoding an envelope. Only the exact shape `iso` would print is taken: a 4-digit
    year, microseconds and UTC; anything else (another offset, no microseconds, a
    compressed payload) returns None and is formatted from the decoded value.
    """
    if (
        state.startswith(_STAMP_PREFIX)
        and state[_STAMP_END : _STAMP_END + len(_UTC_SUFFIX)] == _UTC_SUFFIX
        and state[len(_STAMP_PREFIX)] != ord("0")  # years below 1000 print unpadded
    ):
        return state[len(_STAMP_PREFIX) : _STAMP_END].decode() + "Z"
    return None


@overload
def iso(value: datetime) -> str: ...
@overload
def iso(value: None) -> None: ...
def iso(value: datetime | None) -> str | None:
    """Fixed-width ISO-8601 UTC, so strings sort like times in both stores."""
    if value is None:
        return None
    if value.tzinfo is UTC and value.microsecond and value.year >= 1000:
        # Same text as the strftime below, several times faster (once per event).
        return value.isoformat()[:-6] + "Z"
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def handles(*types: str) -> Callable[[F], F]:
    """Mark a method as the handler of the given event types."""

    def mark(fn: F) -> F:
        fn._handles = types  # type: ignore[attr-defined]
        return fn

    return mark


class Projection:
    """A read model: its tables (DDL with `{t}` for the table name) and its handlers."""

    name: ClassVar[str]
    tables: ClassVar[dict[str, list[str]]]
    _dispatch: ClassVar[dict[str, str]]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        dispatch: dict[str, str] = {}
        for klass in reversed(cls.__mro__):
            for attr, fn in vars(klass).items():
                for event_type in getattr(fn, "_handles", ()):
                    dispatch[event_type] = attr
        cls._dispatch = dispatch

    def __init__(self, prefix: str = "rm_") -> None:
        # Live tables are rm_<name>; a rebuild writes the same projection into other names.
        self.prefix = prefix
        self.t = {logical: prefix + logical for logical in self.tables}
        # Bound once: looking a handler up by name costs more than most handlers' work.
        self._handlers: dict[str, Callable[[Cursor, Envelope], None]] = {
            event_type: getattr(self, method) for event_type, method in self._dispatch.items()
        }

    # Columns added to a table after it was first released, per logical table name. A
    # live table that lacks one is dropped with the projection's other tables and rebuilt
    # from the log by the runner (projections/runner.py `ensure_schema`), so its rows get
    # the values the new handlers derive; the DDL in `tables` declares the column too.
    added_columns: ClassVar[dict[str, tuple[str, ...]]] = {}

    def upgrade(self, cur: Cursor) -> None:
        """Bring live tables of a former layout to this one in place, where that needs no
        replay of the log; runs at start-up before `added_columns` are checked."""

    # Tables whose rows are deleted about as fast as they are written (each session's
    # latest N kept): on PostgreSQL every deleted row stays in the table and its index
    # until a vacuum, and each capping DELETE walks past all of them, so the runner
    # vacuums these itself every VACUUM_EVERY_EVENTS events (projections/runner.py).
    churned: ClassVar[tuple[str, ...]] = ()

    # Indexes only readers use, never the handlers: a rebuild creates them after its
    # rows are in (one sort, instead of an index insert per row, which for a random
    # key touches a different page every time); live tables have them from the start.
    deferred_indexes: ClassVar[dict[str, list[str]]] = {}

    def ddl(self, *, deferred: bool = True) -> list[str]:
        """CREATE statements for this projection's tables (idempotent)."""
        statements = [
            stmt.format(t=self.t[logical], p=self.prefix)
            for logical, stmts in self.tables.items()
            for stmt in stmts
        ]
        return statements + self.deferred_ddl() if deferred else statements

    def deferred_ddl(self) -> list[str]:
        """The `deferred_indexes` statements (see there)."""
        return [
            stmt.format(t=self.t[logical], p=self.prefix)
            for logical, stmts in self.deferred_indexes.items()
            for stmt in stmts
        ]

    @property
    def topics(self) -> frozenset[str]:
        return frozenset(self._dispatch)

    def begin_batch(self, cur: Cursor) -> None:
        """Start a batch (a new transaction): forget state a failed batch may have left."""

    def reads(self, event_type: str) -> bool:
        """Whether `apply` does anything for this event type."""
        return event_type in self._dispatch

    def end_batch(self, cur: Cursor) -> None:
        """Finish work deferred to the end of a batch (same transaction); default none.

        Must leave the same rows as doing that work after every event, so batched and
        event-at-a-time processing stay equal.
        """

    # True: the runner hands the batch's envelopes over at once (`apply_all`) rather than
    # one by one between other projections' handlers. Only for a projection whose
    # handlers neither read other projections' tables nor are read by them mid-batch.
    applies_in_bulk: ClassVar[bool] = False

    def apply_all(self, cur: Cursor, envelopes: Sequence[Envelope]) -> None:
        """Apply envelopes in order (those it reads, beyond its tracked position)."""
        for envelope in envelopes:
            self.apply(cur, envelope)

    def handler(self, event_type: str) -> Callable[[Cursor, Envelope], None]:
        """What applies events of a type it reads: its handler, unless `apply` is overridden."""
        if type(self).apply is Projection.apply:
            return self._handlers.get(event_type, self.apply)
        return self.apply

    def apply(self, cur: Cursor, envelope: Envelope) -> None:
        """Apply one event, ignoring types this projection does not read."""
        handler = self._handlers.get(envelope.type)
        if handler is not None:
            handler(cur, envelope)


class ListenedProjection(Projection):
    """A read model a process keeps an in-memory copy of (learned content, the active
    policies): told through the batch's cursor that the batch changed what the copy
    holds, so the copy is current before the runner reports the batch's positions
    processed. A handler that changes it calls `changed()`."""

    on_change: Callable[[Cursor], None] | None = None
    _changed = False

    def changed(self) -> None:
        self._changed = True

    def begin_batch(self, cur: Cursor) -> None:
        self._changed = False

    def end_batch(self, cur: Cursor) -> None:
        if self._changed and self.on_change is not None:
            self._changed = False
            self.on_change(cur)
