"""C2SP tlog-cosignature (Ed25519, cosignature/v1) and the tlog-witness add-checkpoint rules.

A cosignature is a signed-note signature line whose key ID is the first 4 bytes of
SHA-256(name || "\\n" || 0x04 || public key) and whose signature bytes are an 8-byte
big-endian POSIX timestamp followed by an Ed25519 signature of
"cosignature/v1\\ntime <timestamp>\\n" + the checkpoint's note text. The cosigner's
verifier key is `name+keyID(8 hex)+base64(0x04 || public key)`.

The add-checkpoint request body is "old <size>\\n", at most 63 base64 consistency proof
lines, a blank line, then the signed checkpoint note. `judge_submission` holds the rules
a witness applies against what it last cosigned for that log; the caller runs it inside
the transaction that records the new state, so a concurrent or replayed submission
cannot roll the state back.
"""

from __future__ import annotations

import base64
import re
from dataclasses import dataclass

from domain.merkle import EMPTY_ROOT, ProofError, verify_consistency
from domain.signed_note import (
    CheckpointBody,
    NoteError,
    NoteSignature,
    SignatureCheck,
    VerifierKey,
    decode_base64,
    key_hash,
    signature_line,
    split_note,
)

COSIGNATURE_V1 = 0x04
MAX_PROOF_LINES = 63
_DECIMAL = re.compile(r"0|[1-9][0-9]{0,18}")


def cosigner_key_hash(name: str, public_key: bytes) -> int:
    return key_hash(name, public_key, COSIGNATURE_V1)


def cosigner_verifier_key(name: str, public_key: bytes) -> str:
    encoded = base64.b64encode(bytes([COSIGNATURE_V1]) + public_key).decode()
    return f"{name}+{cosigner_key_hash(name, public_key):08x}+{encoded}"


class CosignerKey(VerifierKey):
    """A witness's cosignature/v1 verifier key, `name+hash+base64(0x04||key)`."""

    KEY_TYPE = COSIGNATURE_V1
    WHAT = ("cosigner key", "an Ed25519 cosignature/v1 key (type 0x04)")


def cosigned_message(note_text: str, timestamp: int) -> bytes:
    """What a cosigner signs for the checkpoint whose note text (without signatures) is given."""
    if not 0 <= timestamp < 2**63:
        raise NoteError("cosignature timestamp out of range")
    return f"cosignature/v1\ntime {timestamp}\n{note_text}".encode()


def cosignature_line(name: str, public_key: bytes, timestamp: int, signature: bytes) -> str:
    key_id = cosigner_key_hash(name, public_key)
    return signature_line(name, key_id, timestamp.to_bytes(8, "big") + signature)


def cosignature_timestamp(signature: NoteSignature) -> int:
    """The POSIX time a cosignature/v1 signature carries; NoteError if it is not one."""
    if len(signature.signature) != 72:
        raise NoteError(f"cosignature by {signature.name} is not 72 bytes")
    return int.from_bytes(signature.signature[:8], "big")


def verified_cosignature(note: str, key: CosignerKey, check: SignatureCheck) -> tuple[int, str]:
    """The timestamp and line of a valid cosignature by `key` on the note; NoteError if none."""
    text, signatures = split_note(note)
    for signature in signatures:
        if (signature.name, signature.key_hash) != (key.name, key.key_hash):
            continue
        timestamp = cosignature_timestamp(signature)
        message = cosigned_message(text, timestamp)
        if not check(key.public_key, message, signature.signature[8:]):
            raise NoteError(f"invalid cosignature by {key.name}")
        return timestamp, signature_line(key.name, key.key_hash, signature.signature)
    raise NoteError(f"note carries no cosignature by {key.name}")


@dataclass(frozen=True)
class AddCheckpoint:
    old: int
    proof: list[bytes]
    note: str


def parse_add_checkpoint(body: str) -> AddCheckpoint:
    """An add-checkpoint request body; NoteError naming what is malformed."""
    head, blank, note = body.partition("\n\n")
    if not blank:
        raise NoteError("request has no blank line before the checkpoint")
    lines = head.split("\n")
    old_text = lines[0].removeprefix("old ")
    if not lines[0].startswith("old ") or _DECIMAL.fullmatch(old_text) is None:
        raise NoteError("first line must be 'old <size>' in decimal")
    if len(lines) - 1 > MAX_PROOF_LINES:
        raise NoteError(f"more than {MAX_PROOF_LINES} consistency proof lines")
    proof = [decode_base64(line, "consistency proof line") for line in lines[1:]]
    if any(len(h) != 32 for h in proof):
        raise NoteError("a consistency proof line is not a 32-byte hash")
    return AddCheckpoint(int(old_text), proof, note)


@dataclass(frozen=True)
class LogState:
    """What a witness last cosigned for one log."""

    size: int
    root: bytes


class Refusal(Exception):
    """Why a witness does not cosign: the HTTP status the protocol gives, and a reason."""

    def __init__(self, status: int, reason: str, known_size: int | None = None) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason
        self.known_size = known_size


def judge_submission(
    request: AddCheckpoint, checkpoint: CheckpointBody, known: LogState | None
) -> LogState:
    """The log's new state if the witness may cosign; Refusal (400, 409 or 422) if not."""
    if request.old > checkpoint.size:
        raise Refusal(400, f"old size {request.old} exceeds checkpoint size {checkpoint.size}")
    known_size = known.size if known else 0
    if request.old != known_size:
        raise Refusal(
            409, f"old size {request.old} is not the cosigned size {known_size}", known_size
        )
    if known and known.size == checkpoint.size and known.root != checkpoint.root:
        raise Refusal(409, f"a different root was cosigned at size {known.size}", known_size)
    try:
        old_root = known.root if known else EMPTY_ROOT
        verify_consistency(request.old, checkpoint.size, old_root, checkpoint.root, request.proof)
    except ProofError as exc:
        raise Refusal(422, f"consistency proof does not verify: {exc}") from None
    return LogState(checkpoint.size, checkpoint.root)
