"""Tamper evidence: a SHA-256 hash chain over the ordered log and HMAC-signed checkpoints of it.

Each link hashes the previous link, then the event's position, aggregate id, version and
type (one JSON array, so no field can bleed into another), a newline, and the event's
payload exactly as stored (the `state` bytes the application wrote). Hashing the stored
bytes, rather than a re-serialisation of the decoded event, covers every byte a replay
reads, is identical on SQLite and PostgreSQL, needs no decoding (so a corrupted payload
is still hashed and reported, not crashed on), and depends on no JSON library details.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import json
import re
from dataclasses import dataclass, replace
from uuid import UUID

# Where the chain starts: a fixed, versioned constant instead of an empty link.
GENESIS = hashlib.sha256(b"tachograph.log-chain.v1").hexdigest()
# A checkpoint is recorded when the chain reaches every multiple of this many events.
CHECKPOINT_INTERVAL = 1000

PERIODIC = "periodic"
SHUTDOWN = "shutdown"


def canonical_id(aggregate_id: UUID | str) -> str:
    """Aggregate ids in one spelling (lowercase, hyphenated), whatever the store returned."""
    return str(aggregate_id if isinstance(aggregate_id, UUID) else UUID(str(aggregate_id)))


def chain_link(
    previous: str, position: int, aggregate_id: str, version: int, type_: str, payload: bytes
) -> str:
    """The link of one event: SHA-256 over the previous link, its header and its payload."""
    header = chain_header(position, aggregate_id, version, type_)
    return next_link(previous, header.encode() + b"\n", payload)


def next_link(previous: str, head: bytes, payload: bytes) -> str:
    """`chain_link` from the header already encoded with its newline (`head`)."""
    digest = hashlib.sha256(bytes.fromhex(previous) + head)
    digest.update(payload)
    return digest.hexdigest()


def chain_header(position: int, aggregate_id: str, version: int, type_: str) -> str:
    """`json.dumps([position, aggregate_id, version, type_])`, compact, byte for byte."""
    if _CANONICAL_ID.fullmatch(aggregate_id) is None:
        return json.dumps(
            [position, aggregate_id, version, type_], separators=(",", ":"), ensure_ascii=False
        )
    # The common case without the encoder: a canonical id needs no escaping and the
    # few event types' JSON is cached, so only two integers are formatted per event.
    return f'[{int(position)},"{aggregate_id}",{int(version)},{_json_string(type_)}]'


_CANONICAL_ID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


@functools.lru_cache(maxsize=1024)
def _json_string(value: str) -> str:
    return json.dumps(value, ensure_ascii=False)


def signing_key_id(key: str) -> str:
    """Short public fingerprint of a signing key, so auditors can tell keys apart."""
    return hashlib.sha256(b"tachograph.log-signing-key\n" + key.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Checkpoint:
    """The chain's link after `seq` events, the last at `position`; signed when a key is set."""

    seq: int
    position: int
    link: str
    kind: str = PERIODIC
    key_id: str | None = None
    signature: str | None = None
    recorded_at: str | None = None

    def message(self) -> bytes:
        """What the signature covers: everything that anchors the chain, nothing incidental."""
        return f"tachograph.log-checkpoint.v1\n{self.seq}\n{self.position}\n{self.link}".encode()

    def signed(self, key: str | None) -> Checkpoint:
        """This checkpoint signed with the key, or unchanged (unsigned) without one."""
        if key is None:
            return self
        mac = hmac.new(key.encode(), self.message(), hashlib.sha256).hexdigest()
        return replace(self, key_id=signing_key_id(key), signature=mac)

    def signature_state(self, key: str | None) -> str:
        """unsigned | valid | invalid | other_key (signed with a key we do not hold) | unchecked."""
        if self.signature is None:
            return "unsigned"
        if key is None:
            return "unchecked"
        if self.key_id != signing_key_id(key):
            return "other_key"
        expected = hmac.new(key.encode(), self.message(), hashlib.sha256).hexdigest()
        return "valid" if hmac.compare_digest(expected, self.signature) else "invalid"
