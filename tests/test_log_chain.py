"""Hash chain, checkpoint signatures and break classification, on plain in-memory logs."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from domain.log_chain import GENESIS, Checkpoint, chain_header, chain_link, signing_key_id
from domain.log_verify import RecordedLink, StoredEvent, VerifyReport, verify_chain
from infra.log_wire import checkpoint_from_wire, checkpoint_wire

KEY = "k" * 32


def event(position: int, aggregate: int = 0, version: int = 1, body: bytes = b"{}") -> StoredEvent:
    aggregate_id = f"00000000-0000-0000-0000-{(aggregate or position):012d}"
    return StoredEvent.of(position, aggregate_id, version, "Session.Created", body)


class FakeLog:
    """A log, the links recorded when it was appended, and its checkpoints every `every` events."""

    def __init__(self, size: int, every: int = 1000) -> None:
        self.events = [event(p, body=b'{"n":%d}' % p) for p in range(1, size + 1)]
        self.recorded: list[RecordedLink] = []
        self.checkpoints: list[Checkpoint] = []
        link = GENESIS
        for seq, e in enumerate(self.events, 1):
            link = chain_link(link, e.position, e.aggregate_id, e.version, e.type, e.payload)
            self.recorded.append(
                RecordedLink(e.position, seq, e.aggregate_id, e.version, e.type, link)
            )
            if seq % every == 0:
                self.checkpoints.append(Checkpoint(seq, e.position, link).signed(KEY))

    def recorded_position(self, aggregate_id: str, version: int) -> int | None:
        key = (aggregate_id, version)
        found = [r.position for r in self.recorded if (r.aggregate_id, r.version) == key]
        return found[0] if found else None

    def stored_position(self, aggregate_id: str, version: int) -> int | None:
        key = (aggregate_id, version)
        found = [e.position for e in self.events if (e.aggregate_id, e.version) == key]
        return found[0] if found else None

    def verify(
        self,
        key: str | None = KEY,
        chained_seq: int | None = None,
        progress: Callable[[int], None] | None = None,
    ) -> VerifyReport:
        chained = len(self.recorded) if chained_seq is None else chained_seq
        return verify_chain(
            self.events,
            self.recorded,
            self.checkpoints,
            self,
            key=key,
            source="ledger",
            chained_seq=chained,
            progress=progress,
        )


def test_link_changes_with_every_covered_field() -> None:
    base = ("00000000-0000-0000-0000-000000000001", 1, "Session.Created", b'{"a":1}')
    link = chain_link(GENESIS, 7, *base)
    assert link == chain_link(GENESIS, 7, *base)
    variants = [
        chain_link(GENESIS, 8, *base),
        chain_link(GENESIS, 7, "00000000-0000-0000-0000-000000000002", *base[1:]),
        chain_link(GENESIS, 7, base[0], 2, *base[2:]),
        chain_link(GENESIS, 7, base[0], 1, "Session.Renamed", base[3]),
        chain_link(GENESIS, 7, *base[:3], b'{"a":2}'),
        chain_link(link, 7, *base),
    ]
    assert link not in variants and len(set(variants)) == len(variants)


@given(
    position=st.integers(min_value=1, max_value=2**62),
    aggregate_id=st.one_of(st.uuids().map(str), st.text(max_size=40)),
    version=st.integers(min_value=1, max_value=2**31),
    type_=st.one_of(st.sampled_from(["Session.Created", "Task.Claimed"]), st.text(max_size=20)),
)
def test_header_is_the_compact_json_array_links_have_always_hashed(
    position: int, aggregate_id: str, version: int, type_: str
) -> None:
    # Recorded chains must keep verifying: the fast header equals the original encoding.
    expected = json.dumps(
        [position, aggregate_id, version, type_], separators=(",", ":"), ensure_ascii=False
    )
    assert chain_header(position, aggregate_id, version, type_) == expected


def test_header_fields_cannot_bleed_into_the_payload() -> None:
    # Moving bytes between the type and the payload must change the link.
    a = chain_link(GENESIS, 1, "00000000-0000-0000-0000-000000000001", 1, "T\n", b"x")
    b = chain_link(GENESIS, 1, "00000000-0000-0000-0000-000000000001", 1, "T", b"\nx")
    assert a != b


def test_signature_states() -> None:
    checkpoint = Checkpoint(1000, 1000, GENESIS)
    signed = checkpoint.signed(KEY)
    assert checkpoint.signed(None) == checkpoint
    assert signed.key_id == signing_key_id(KEY) and signed.signature is not None
    assert signed.signature_state(KEY) == "valid"
    assert replace(signed, link="0" * 64).signature_state(KEY) == "invalid"
    assert replace(signed, position=999).signature_state(KEY) == "invalid"
    assert signed.signature_state("another key of enough length....") == "other_key"
    assert signed.signature_state(None) == "unchecked"
    assert checkpoint.signature_state(KEY) == "unsigned"
    assert checkpoint_from_wire(checkpoint_wire(signed)) == signed
    with pytest.raises(ValueError):
        checkpoint_from_wire({"seq": "1", "position": 1, "link": GENESIS})
    with pytest.raises(ValueError):
        checkpoint_from_wire({"seq": 1, "position": 1, "link": "not hex"})


def test_untouched_log_verifies_with_its_count() -> None:
    log = FakeLog(2500)
    report = log.verify()
    assert report.ok, report.chain_break
    assert (report.events, report.head_position, report.checkpoints_checked) == (2500, 2500, 2)
    assert report.head_link == log.recorded[-1].link and report.signed == 2


def test_edited_payload_is_reported_at_its_position() -> None:
    log = FakeLog(50)
    log.events[19] = replace(log.events[19], payload=b'{"n":21}')
    report = log.verify()
    assert report.chain_break is not None
    assert (report.chain_break.position, report.chain_break.kind) == (20, "edited")
    assert report.events == 19


def test_missing_inserted_and_reordered_events_are_told_apart() -> None:
    missing = FakeLog(50)
    del missing.events[29]
    inserted = FakeLog(50)
    inserted.events.insert(9, event(10, aggregate=999))
    inserted.events = [replace(e, position=i) for i, e in enumerate(inserted.events, 1)]
    reordered = FakeLog(50)
    e4, e8 = reordered.events[3], reordered.events[7]
    reordered.events[3], reordered.events[7] = replace(e8, position=4), replace(e4, position=8)
    results = {
        name: (log.verify().chain_break.position, log.verify().chain_break.kind)  # type: ignore[union-attr]
        for name, log in (("missing", missing), ("inserted", inserted), ("reordered", reordered))
    }
    assert results == {
        "missing": (30, "missing"),
        "inserted": (10, "inserted"),
        "reordered": (4, "reordered"),
    }


def test_truncated_tail_is_missing() -> None:
    log = FakeLog(50)
    del log.events[45:]
    report = log.verify()
    assert report.chain_break is not None
    assert (report.chain_break.position, report.chain_break.kind) == (46, "missing")


def test_rewritten_links_are_caught_by_the_checkpoint_of_their_segment() -> None:
    log = FakeLog(3000)
    rewritten = FakeLog(3000)
    rewritten.events[1499] = replace(rewritten.events[1499], payload=b"forged")
    # The attacker recomputes every link from the altered log, but cannot re-sign.
    again = FakeLog(0)
    again.events = rewritten.events
    link = GENESIS
    for seq, e in enumerate(again.events, 1):
        link = chain_link(link, e.position, e.aggregate_id, e.version, e.type, e.payload)
        again.recorded.append(
            RecordedLink(e.position, seq, e.aggregate_id, e.version, e.type, link)
        )
    again.checkpoints = log.checkpoints
    report = again.verify()
    assert report.chain_break is not None
    assert (report.chain_break.position, report.chain_break.kind) == (1001, "edited")
    assert "between positions 1000 and 2000" in report.chain_break.message


def test_forged_missing_and_stripped_checkpoints_fail() -> None:
    forged = FakeLog(3000)
    forged.checkpoints[1] = replace(forged.checkpoints[1], signature="0" * 64)
    missing = FakeLog(3000)
    del missing.checkpoints[1]
    stripped = FakeLog(3000)
    stripped.checkpoints[2] = replace(stripped.checkpoints[2], signature=None, key_id=None)
    found = {}
    for name, log in (("forged", forged), ("missing", missing), ("stripped", stripped)):
        b = log.verify().chain_break
        assert b is not None
        found[name] = (b.position, b.kind)
    assert found == {
        "forged": (2000, "forged_checkpoint"),
        "missing": (2000, "missing_checkpoint"),
        "stripped": (3000, "forged_checkpoint"),
    }


def test_unsigned_checkpoints_verify_with_a_warning() -> None:
    log = FakeLog(2000)
    log.checkpoints = [replace(c, signature=None, key_id=None) for c in log.checkpoints]
    report = log.verify()
    assert report.ok and report.unsigned == 2
    assert any("No checkpoint is signed" in w for w in report.warnings)
    assert any("SIGNING_KEY is unset" in w for w in log.verify(key=None).warnings)


def test_progress_reports_every_event_once() -> None:
    seen: list[int] = []
    report = FakeLog(12_345, every=5000).verify(progress=seen.append, chained_seq=0)
    assert report.ok
    assert sum(seen) == 12_345 and len(seen) == 3
