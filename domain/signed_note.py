"""C2SP signed notes and tlog-checkpoint bodies: the text formats, without the cryptography.

A checkpoint body is three lines: the log's origin, the tree size in decimal, the root
hash in standard base64, each ending in a newline (C2SP tlog-checkpoint). A signed note
is the body, a blank line, then one line per signature: an em dash, a space, the key
name, a space, and base64 of the 4-byte key hash followed by the signature (C2SP
signed-note). The key hash is the first 4 bytes of SHA-256(name || "\\n" || 0x01 ||
public key) for Ed25519 keys, and a verifier key is `name+hash(8 hex)+base64(0x01||key)`.
The signature algorithm itself is a callback, so this module stays stdlib only.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar, Self

ED25519 = 0x01
_SIG_PREFIX = "\u2014 "  # em dash, space
_MAX_SIGNATURES = 100
_B64 = re.compile(r"[A-Za-z0-9+/]*={0,2}")

# Verifies an Ed25519 signature of a message under a 32-byte public key.
SignatureCheck = Callable[[bytes, bytes, bytes], bool]


class NoteError(ValueError):
    """A note, key or checkpoint that is malformed or does not verify; says which."""


def valid_name(name: str) -> bool:
    return bool(name) and "+" not in name and not any(c.isspace() for c in name)


def key_hash(name: str, public_key: bytes, key_type: int = ED25519) -> int:
    """The signed-note key ID of a key of `key_type`, as an unsigned 32-bit integer."""
    digest = hashlib.sha256(name.encode() + b"\n" + bytes([key_type]) + public_key).digest()
    return int.from_bytes(digest[:4], "big")


def verifier_key(name: str, public_key: bytes) -> str:
    encoded = base64.b64encode(bytes([ED25519]) + public_key).decode()
    return f"{name}+{key_hash(name, public_key):08x}+{encoded}"


@dataclass(frozen=True)
class VerifierKey:
    name: str
    key_hash: int
    public_key: bytes

    # The signature type byte of the encoded key, and how errors name the key.
    KEY_TYPE: ClassVar[int] = ED25519
    WHAT: ClassVar[tuple[str, str]] = ("verifier key", "an Ed25519 key")

    @classmethod
    def parse(cls, text: str) -> Self:
        """Parse `name+hash+base64key`; NoteError naming what is wrong."""
        return cls(*parse_vkey(text, cls.KEY_TYPE, *cls.WHAT))


def parse_vkey(text: str, key_type: int, what: str, kind: str) -> tuple[str, int, bytes]:
    """Name, key ID and public key of `name+hash+base64(type||key)`; NoteError if bad."""
    parts = text.strip().split("+", 2)
    if len(parts) != 3 or not valid_name(parts[0]):
        raise NoteError(f"{what} must be name+hash+key")
    name, hash_hex, encoded = parts
    key = decode_base64(encoded, what)
    if len(key) != 33 or key[0] != key_type:
        raise NoteError(f"{what} is not {kind}")
    if re.fullmatch(r"[0-9a-f]{8}", hash_hex) is None:
        raise NoteError(f"{what} hash must be 8 lowercase hex digits")
    if int(hash_hex, 16) != key_hash(name, key[1:], key_type):
        raise NoteError(f"{what} hash does not match its name and key")
    return name, int(hash_hex, 16), key[1:]


def decode_base64(text: str, what: str) -> bytes:
    if _B64.fullmatch(text) is None:
        raise NoteError(f"{what} is not base64")
    try:
        return base64.b64decode(text, validate=True)
    except binascii.Error:
        raise NoteError(f"{what} is not base64") from None


def checkpoint_body(origin: str, size: int, root: bytes) -> str:
    return f"{origin}\n{size}\n{base64.b64encode(root).decode()}\n"


@dataclass(frozen=True)
class CheckpointBody:
    origin: str
    size: int
    root: bytes

    @classmethod
    def parse(cls, text: str) -> CheckpointBody:
        """The first three lines of a checkpoint body (extension lines are ignored)."""
        lines = text.split("\n")
        if len(lines) < 4 or not lines[0]:
            raise NoteError("checkpoint body must be origin, size and root lines")
        size_text, root_text = lines[1], lines[2]
        if re.fullmatch(r"0|[1-9][0-9]{0,18}", size_text) is None:
            raise NoteError("checkpoint tree size is not a decimal number")
        root = decode_base64(root_text, "checkpoint root hash")
        if len(root) != 32:
            raise NoteError("checkpoint root hash is not 32 bytes")
        return cls(lines[0], int(size_text), root)


def signature_line(name: str, public_key_hash: int, signature: bytes) -> str:
    encoded = base64.b64encode(public_key_hash.to_bytes(4, "big") + signature).decode()
    return f"{_SIG_PREFIX}{name} {encoded}\n"


def signed_note(text: str, name: str, public_key_hash: int, signature: bytes) -> str:
    """The note text followed by its signature block (one signature)."""
    if not text.endswith("\n"):
        raise NoteError("note text must end in a newline")
    return text + "\n" + signature_line(name, public_key_hash, signature)


@dataclass(frozen=True)
class NoteSignature:
    name: str
    key_hash: int
    signature: bytes


def split_note(note: str) -> tuple[str, list[NoteSignature]]:
    """The signed text and every signature line of a note; NoteError if malformed."""
    cut = note.rfind("\n\n")
    if cut < 0 or not note.endswith("\n"):
        raise NoteError("note has no signature block")
    text, block = note[: cut + 1], note[cut + 2 :]
    signatures = []
    for line in block.removesuffix("\n").split("\n"):
        if not line.startswith(_SIG_PREFIX):
            raise NoteError(f"malformed signature line {line!r}")
        name, _, encoded = line[len(_SIG_PREFIX) :].partition(" ")
        raw = decode_base64(encoded, "signature")
        if not valid_name(name) or len(raw) < 5:
            raise NoteError(f"malformed signature line {line!r}")
        signatures.append(NoteSignature(name, int.from_bytes(raw[:4], "big"), raw[4:]))
    if not signatures or len(signatures) > _MAX_SIGNATURES:
        raise NoteError("note has no signatures or too many")
    return text, signatures


def open_note(note: str, key: VerifierKey, check: SignatureCheck) -> str:
    """The note's text if it carries a valid signature by `key`; NoteError otherwise."""
    text, signatures = split_note(note)
    mine = [s for s in signatures if (s.name, s.key_hash) == (key.name, key.key_hash)]
    if not mine:
        raise NoteError(f"note is not signed by key {key.name}+{key.key_hash:08x}")
    if not all(check(key.public_key, text.encode(), s.signature) for s in mine):
        raise NoteError(f"invalid signature for key {key.name}+{key.key_hash:08x}")
    return text
