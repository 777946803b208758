"""TACHOGRAPH_WITNESSES: the witnesses the log asks to cosign its checkpoints.

Comma-separated entries `URL=COSIGNERKEY`: the witness's submission prefix (an http or
https URL, `/add-checkpoint` is appended) and its C2SP cosignature/v1 verifier key
(`name+hash+base64(0x04||key)`). The URL may hold no `=`, so the first one ends it.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit

from domain.cosignature import CosignerKey
from domain.signed_note import NoteError


@dataclass(frozen=True)
class WitnessPeer:
    url: str  # the submission prefix
    key: CosignerKey


def parse_witnesses(text: str) -> tuple[WitnessPeer, ...]:
    """Every entry of the setting; ValueError naming the entry that is wrong."""
    peers: list[WitnessPeer] = []
    for entry in (part.strip() for part in text.split(",")):
        if not entry:
            continue
        url, sep, key_text = entry.partition("=")
        if not sep:
            raise ValueError(f"expected URL=COSIGNERKEY, got {entry!r}")
        try:
            parts = urlsplit(url)
            parts.port  # noqa: B018 - reading the port validates it
        except ValueError:
            raise ValueError(f"not a valid URL, got {url!r}") from None
        if parts.scheme not in ("http", "https") or not parts.hostname or parts.query:
            raise ValueError(f"expected an http:// or https:// URL without a query, got {url!r}")
        try:
            key = CosignerKey.parse(key_text)
        except NoteError as exc:
            raise ValueError(f"witness {url}: {exc}") from None
        if any(p.key.name == key.name for p in peers):
            raise ValueError(f"witness key name {key.name} is given twice")
        peers.append(WitnessPeer(url, key))
    return tuple(peers)
