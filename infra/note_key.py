"""The log's Ed25519 note key: its file, signing checkpoints, checking note signatures.

The file holds one line in the format of golang.org/x/mod/sumdb/note signer keys,
`PRIVATE+KEY+<name>+<key hash>+<base64(0x01 || 32-byte seed)>`, so the standard tools can
read it. The key's name is the log's origin: the first line of every checkpoint.
"""

from __future__ import annotations

import base64
import os
import secrets
import tempfile
from dataclasses import dataclass
from pathlib import Path

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from domain.cosignature import (
    COSIGNATURE_V1,
    cosignature_line,
    cosigned_message,
    cosigner_verifier_key,
)
from domain.signed_note import (
    ED25519,
    NoteError,
    VerifierKey,
    checkpoint_body,
    decode_base64,
    key_hash,
    signed_note,
    valid_name,
    verifier_key,
)
from infra.settings import SettingsError

_PREFIX = "PRIVATE+KEY+"


def ed25519_check(public_key: bytes, message: bytes, signature: bytes) -> bool:
    """Whether the signature is a valid Ed25519 signature of the message."""
    try:
        Ed25519PublicKey.from_public_bytes(public_key).verify(signature, message)
    except (InvalidSignature, ValueError):
        return False
    return True


@dataclass(frozen=True)
class NoteKey:
    """An Ed25519 signer key with its name (the log's origin)."""

    name: str
    seed: bytes

    @property
    def public_key(self) -> bytes:
        public = Ed25519PrivateKey.from_private_bytes(self.seed).public_key()
        return public.public_bytes(Encoding.Raw, PublicFormat.Raw)

    @property
    def key_hash(self) -> int:
        return key_hash(self.name, self.public_key)

    @property
    def verifier_key(self) -> str:
        """The public note verifier key, `name+hash+base64key`."""
        return verifier_key(self.name, self.public_key)

    def verifier(self) -> VerifierKey:
        return VerifierKey(self.name, self.key_hash, self.public_key)

    def encode(self) -> str:
        seed = base64.b64encode(bytes([ED25519]) + self.seed).decode()
        return f"{_PREFIX}{self.name}+{self.key_hash:08x}+{seed}"

    @classmethod
    def parse(cls, text: str, *, cosigner: bool = False) -> NoteKey:
        """Parse a signer key; NoteError naming what is wrong.

        A witness (`cosigner`) also takes a cosignature/v1 signer key (type 0x04, its hash
        over that type), as transparency-dev/formats and other witnesses write them.
        """
        parts = text.strip().removeprefix(_PREFIX).split("+", 2)
        if not text.strip().startswith(_PREFIX) or len(parts) != 3 or not valid_name(parts[0]):
            raise NoteError("signer key must be PRIVATE+KEY+name+hash+key")
        raw = decode_base64(parts[2], "signer key")
        types = (ED25519, COSIGNATURE_V1) if cosigner else (ED25519,)
        if len(raw) != 33 or raw[0] not in types:
            raise NoteError("signer key is not an Ed25519 key")
        key = cls(parts[0], raw[1:])
        if parts[1] != f"{key_hash(key.name, key.public_key, raw[0]):08x}":
            raise NoteError("signer key hash does not match its name and key")
        return key

    def sign(self, text: str) -> str:
        """The text as a signed note carrying this key's signature."""
        signature = Ed25519PrivateKey.from_private_bytes(self.seed).sign(text.encode())
        return signed_note(text, self.name, self.key_hash, signature)

    def sign_checkpoint(self, size: int, root: bytes) -> str:
        return self.sign(checkpoint_body(self.name, size, root))

    @property
    def cosigner_verifier_key(self) -> str:
        """This key as a witness's cosignature/v1 verifier key (type 0x04)."""
        return cosigner_verifier_key(self.name, self.public_key)

    def cosign(self, note_text: str, timestamp: int) -> str:
        """A C2SP cosignature/v1 signature line on a checkpoint's note text."""
        private = Ed25519PrivateKey.from_private_bytes(self.seed)
        signature = private.sign(cosigned_message(note_text, timestamp))
        return cosignature_line(self.name, self.public_key, timestamp, signature)


def load_note_key(
    path: Path,
    *,
    create: bool,
    kind: str = "tachograph.log",
    setting: str = "TACHOGRAPH_LOG_NOTE_KEY_FILE",
    cosigner: bool = False,
) -> NoteKey | None:
    """The key in `path`; with `create`, a new one written there (mode 0600) if absent.

    `kind` starts a new key's name; `setting` is what an unusable file is reported as;
    a `cosigner` (a witness's key) may also be a cosignature/v1 signer key.
    """
    try:
        return _read(path, setting, cosigner)
    except FileNotFoundError:
        if not create:
            return None
    key = NoteKey(f"{kind}/{secrets.token_hex(4)}", secrets.token_bytes(32))
    path.parent.mkdir(parents=True, exist_ok=True)
    # Written whole to a private temporary file, then linked into place: a process
    # starting at the same moment reads either no file or a complete one, and the
    # first link wins (link never replaces an existing file).
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=".note-key-")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(key.encode() + "\n")
        os.link(temporary, path)
    except FileExistsError:
        return _read(path, setting, cosigner)
    finally:
        os.unlink(temporary)
    return key


def _read(path: Path, setting: str, cosigner: bool) -> NoteKey:
    """The key in an existing file; SettingsError naming the setting when it is unusable."""
    try:
        return NoteKey.parse(path.read_text(encoding="utf-8"), cosigner=cosigner)
    except FileNotFoundError:
        raise
    except (OSError, UnicodeDecodeError, NoteError) as exc:
        raise SettingsError(f"{setting}: cannot use {path}: {exc}") from None
