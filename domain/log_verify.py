"""Recompute the hash chain over the stored log and find the first place it breaks.

Two records anchor the recomputed chain: the per-event links the log-checkpoints read
model wrote as each event arrived (they pinpoint the exact position and kind of a
break), and the checkpoints (every 1,000 events and at shutdown, HMAC-signed) that
stop someone who can rewrite the database from rewriting the per-event links too.
The first break in log order is reported; nothing after it is trusted.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from domain.log_chain import CHECKPOINT_INTERVAL, GENESIS, Checkpoint, chain_header, next_link

EDITED, MISSING, INSERTED, REORDERED = "edited", "missing", "inserted", "reordered"
FORGED_CHECKPOINT, MISSING_CHECKPOINT = "forged_checkpoint", "missing_checkpoint"


@dataclass(frozen=True)
class StoredEvent:
    """One event as stored: what the chain covers.

    `head` is its chain header with the newline, encoded once (`of`) for both the chain
    link and the Merkle leaf, which hash it before the payload.
    """

    position: int
    aggregate_id: str
    version: int
    type: str
    payload: bytes
    head: bytes

    @classmethod
    def of(
        cls, position: int, aggregate_id: str, version: int, type_: str, payload: bytes
    ) -> StoredEvent:
        header = chain_header(position, aggregate_id, version, type_)
        return cls(position, aggregate_id, version, type_, payload, header.encode() + b"\n")


@dataclass(frozen=True)
class RecordedLink:
    """The link recorded for an event when it was appended (the read model's row)."""

    position: int
    seq: int
    aggregate_id: str
    version: int
    type: str
    link: str


class Lookups(Protocol):
    """Point queries used only to classify a break once one is found."""

    def recorded_position(self, aggregate_id: str, version: int) -> int | None:
        """Where the chain recorded this event, if anywhere."""

    def stored_position(self, aggregate_id: str, version: int) -> int | None:
        """Where the log stores this event now, if anywhere."""


@dataclass(frozen=True)
class ChainBreak:
    """The first position where the stored log stops matching the recorded chain."""

    position: int
    kind: str
    message: str
    seq: int | None = None


@dataclass
class VerifyReport:
    """Outcome of one verification."""

    source: str
    events: int = 0
    head_position: int = 0
    head_link: str = GENESIS
    chained_through: int = 0
    checkpoints: int = 0
    checkpoints_checked: int = 0
    signed: int = 0
    unsigned: int = 0
    chain_break: ChainBreak | None = None
    warnings: list[str] = field(default_factory=list)
    # The Merkle tree's leaves compared, and signed checkpoints (notes) found and matched.
    merkle_leaves: int = 0
    signed_roots: int = 0
    signed_roots_checked: int = 0
    # How far an auditor may trust the checkpoints: `unsigned` (no note verified under
    # the log's key), `signed` (the key alone vouches), `witnessed` (`cosigned_by` of the
    # `witnesses` configured hold a valid cosignature on a verified checkpoint).
    assurance: str = "unsigned"
    witnesses: int = 0
    cosigned_by: int = 0

    @property
    def ok(self) -> bool:
        return self.chain_break is None

    @property
    def assurance_text(self) -> str:
        if self.assurance == "witnessed":
            return f"witnessed by {self.cosigned_by} of {self.witnesses}"
        return self.assurance


def verify_chain(
    events: Iterable[StoredEvent],
    recorded: Iterable[RecordedLink],
    checkpoints: Sequence[Checkpoint],
    lookups: Lookups,
    *,
    key: str | None,
    source: str,
    chained_seq: int = 0,
    progress: Callable[[int], None] | None = None,
) -> VerifyReport:
    """Recompute the chain over `events` (log order) and compare it with what was recorded."""
    # `chained_seq` is how many events the recorded links cover: a checkpoint must exist at
    # every multiple of the interval up to it, because the ledger row is written in the
    # same transaction as its link, so a gap means deleted rows.
    report = VerifyReport(source=source, checkpoints=len(checkpoints))
    ordered = sorted(checkpoints, key=lambda c: c.seq)
    problems = _signature_problems(ordered, key, report)
    # A checkpoint that fails its signature is reported as such and anchors nothing.
    forged = {p.seq for p in problems if p.seq is not None}
    anchors = [c for c in ordered if c.seq not in forged]
    scan = _Scan(report, iter(recorded), anchors, lookups, chained_seq, progress, forged)
    event_break = scan.run(events)
    found = [b for b in (*problems, event_break) if b is not None]
    report.chain_break = min(found, key=lambda b: b.position) if found else None
    if key is None:
        report.warnings.append(
            "TACHOGRAPH_LOG_SIGNING_KEY is unset: checkpoint signatures were not checked."
        )
    elif ordered and report.signed == 0:
        report.warnings.append(
            "No checkpoint is signed: keep exported checkpoints (tachograph checkpoints "
            "--out) so a rewritten history can still be caught."
        )
    if report.head_position > report.chained_through and report.chained_through:
        report.warnings.append(
            f"Positions after {report.chained_through} are not chained yet "
            "(the read model is catching up); they were hashed but not compared."
        )
    return report


def _signature_problems(
    ordered: Sequence[Checkpoint], key: str | None, report: VerifyReport
) -> list[ChainBreak]:
    problems: list[ChainBreak] = []
    signed_before = False
    for cp in ordered:
        state = cp.signature_state(key)
        if state == "unsigned":
            report.unsigned += 1
        else:
            report.signed += 1
        if state == "invalid":
            problems.append(
                ChainBreak(
                    cp.position,
                    FORGED_CHECKPOINT,
                    f"Checkpoint {cp.seq} (position {cp.position}) has a signature that does not "
                    "match its contents: it was altered or recomputed without the signing key.",
                    cp.seq,
                )
            )
        elif state == "other_key":
            report.warnings.append(
                f"Checkpoint {cp.seq} is signed with key {cp.key_id}, not the configured key."
            )
        elif state == "unsigned" and key is not None and signed_before:
            # Once signing began, an unsigned checkpoint means signatures were stripped
            # (or a process ran without the key): either way the anchor cannot be trusted.
            problems.append(
                ChainBreak(
                    cp.position,
                    FORGED_CHECKPOINT,
                    f"Checkpoint {cp.seq} (position {cp.position}) is unsigned although earlier "
                    "ones are signed: signatures were stripped or a process lacks the key.",
                    cp.seq,
                )
            )
        signed_before = signed_before or state != "unsigned"
    return problems


class _Scan:
    """One pass over the stored log, merge-joined with the recorded links and checkpoints."""

    def __init__(
        self,
        report: VerifyReport,
        recorded: Iterator[RecordedLink],
        checkpoints: Sequence[Checkpoint],
        lookups: Lookups,
        chained_seq: int,
        progress: Callable[[int], None] | None,
        forged: set[int],
    ) -> None:
        self.report = report
        self.recorded = recorded
        self.checkpoints = iter(checkpoints)
        self.expected_seqs = {c.seq for c in checkpoints} | forged
        self.lookups = lookups
        self.chained_seq = chained_seq
        self.progress = progress
        self.anchor = (0, 0)  # (seq, position) of the last checkpoint that matched
        self.segment_start: int | None = None

    def run(self, events: Iterable[StoredEvent]) -> ChainBreak | None:
        report = self.report
        link, seq, unreported = GENESIS, 0, 0
        r = next(self.recorded, None)
        cp = next(self.checkpoints, None)
        try:
            for e in events:
                seq += 1
                link = next_link(link, e.head, e.payload)
                if self.segment_start is None:
                    self.segment_start = e.position
                if r is not None:
                    found = self._compare(e, r, link)
                    if found is not None:
                        return found
                    report.chained_through = r.position
                    r = next(self.recorded, None)
                while cp is not None and (seq >= cp.seq or e.position >= cp.position):
                    if (seq, e.position, link) != (cp.seq, cp.position, cp.link):
                        return self._segment_break(cp, seq, e.position)
                    report.checkpoints_checked += 1
                    self.anchor, self.segment_start = (cp.seq, cp.position), None
                    cp = next(self.checkpoints, None)
                if (
                    seq % CHECKPOINT_INTERVAL == 0
                    and seq <= self.chained_seq
                    and seq not in self.expected_seqs
                ):
                    return ChainBreak(
                        e.position,
                        MISSING_CHECKPOINT,
                        f"No checkpoint recorded after event {seq} (position {e.position}): "
                        "checkpoint rows were deleted.",
                        seq,
                    )
                report.events, report.head_position, report.head_link = seq, e.position, link
                unreported += 1
                if self.progress is not None and unreported >= 5000:
                    self.progress(unreported)
                    unreported = 0
        finally:
            if self.progress is not None and unreported:
                self.progress(unreported)
        if r is not None:
            return ChainBreak(
                r.position,
                MISSING,
                f"Event {r.aggregate_id} v{r.version} ({r.type}) was recorded at position "
                f"{r.position} but the log ends at position {report.head_position}.",
                r.seq,
            )
        if cp is not None:
            return ChainBreak(
                report.head_position + 1,
                MISSING,
                f"Checkpoint {cp.seq} covers position {cp.position}, but the log ends at "
                f"position {report.head_position} after {seq} events.",
                cp.seq,
            )
        return None

    def _compare(self, e: StoredEvent, r: RecordedLink, link: str) -> ChainBreak | None:
        if r.position < e.position:
            return ChainBreak(
                r.position,
                MISSING,
                f"Event {r.aggregate_id} v{r.version} ({r.type}) recorded at position "
                f"{r.position} is no longer in the log.",
                r.seq,
            )
        if r.position > e.position:
            return ChainBreak(
                e.position,
                INSERTED,
                f"Position {e.position} holds an event the chain never recorded "
                f"({e.aggregate_id} v{e.version}, {e.type}).",
            )
        if (r.aggregate_id, r.version) != (e.aggregate_id, e.version):
            if self.lookups.recorded_position(e.aggregate_id, e.version) is not None:
                kind, what = REORDERED, "an event the chain recorded at another position"
            elif self.lookups.stored_position(r.aggregate_id, r.version) is not None:
                kind, what = INSERTED, "an event the chain never recorded, pushing later ones on"
            else:
                kind, what = EDITED, "an event whose aggregate id or version was rewritten"
            return ChainBreak(
                e.position,
                kind,
                f"Position {e.position} holds {what} ({e.aggregate_id} v{e.version}); the chain "
                f"recorded {r.aggregate_id} v{r.version} there.",
                r.seq,
            )
        if r.type != e.type or r.link != link:
            return ChainBreak(
                e.position,
                EDITED,
                f"The event at position {e.position} ({e.aggregate_id} v{e.version}) was "
                "changed after it was recorded (type or payload differs).",
                r.seq,
            )
        return None

    def _segment_break(self, cp: Checkpoint, seq: int, position: int) -> ChainBreak:
        # The per-event links agree with the log here, so they were rewritten along with
        # it; only the checkpoint still tells the truth, and only per segment.
        if seq < cp.seq:
            kind = MISSING
        elif position < cp.position:
            kind = INSERTED
        else:
            kind = EDITED
        start = self.segment_start if self.segment_start is not None else position
        return ChainBreak(
            start,
            kind,
            f"The log between positions {self.anchor[1]} and {cp.position} does not match "
            f"checkpoint {cp.seq} (recomputed: {seq} events through position {position}); "
            "the first altered event is in that range.",
            cp.seq,
        )
