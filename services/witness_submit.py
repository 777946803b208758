"""Asks each configured witness to cosign the log's latest signed checkpoint.

Run by a scheduler job, never per hook event. For each witness behind the latest
checkpoint: an add-checkpoint request (C2SP tlog-witness) from the size it last
cosigned (the cosignature ledger), with the RFC 6962 consistency proof from there. A 409
names the size the witness holds; one retry proves from that size instead (a lost
ledger row, or another replica's submission). Only lines that verify under the
witness's configured key are kept. Every failure is logged and retried at the next run.
"""

from __future__ import annotations

import base64
import logging
from collections.abc import Iterable
from functools import partial

import httpx

from domain.cosignature import verified_cosignature
from domain.merkle import consistency_proof
from domain.signed_note import NoteError
from infra.note_key import ed25519_check
from infra.witness_peers import WitnessPeer
from projections.log_cosignatures import cosigned_size, record_cosignature
from projections.log_tree import live_tables, read_nodes
from projections.store import ReadStore
from services.log_proofs import SignedCheckpoint, latest_checkpoint

log = logging.getLogger(__name__)

TIMEOUT_S = 10.0


def submit_to_witnesses(store: ReadStore, peers: Iterable[WitnessPeer]) -> int:
    """Submit the latest checkpoint to every witness behind it; how many cosigned."""
    latest = latest_checkpoint(store)
    if latest is None:
        return 0
    cosigned = 0
    with httpx.Client(timeout=TIMEOUT_S) as client:
        for peer in peers:
            old = cosigned_size(store, peer.key.name)
            if old >= latest.size:
                continue
            try:
                line = _submit(client, store, peer, latest, old)
            except (httpx.HTTPError, NoteError, LookupError) as exc:
                log.warning("witness %s did not cosign size %d: %s", peer.url, latest.size, exc)
                continue
            record_cosignature(store, latest.size, peer.key.name, line)
            cosigned += 1
    return cosigned


def _submit(
    client: httpx.Client, store: ReadStore, peer: WitnessPeer, latest: SignedCheckpoint, old: int
) -> str:
    answer = _post(client, store, peer, latest, old)
    if answer.status_code == 409 and answer.text.strip().isdigit():
        known = int(answer.text.strip())
        if known > latest.size:
            raise NoteError(f"the witness holds size {known}, larger than this log's {latest.size}")
        if known != old:
            answer = _post(client, store, peer, latest, known)
    if answer.status_code != 200:
        raise NoteError(f"answered {answer.status_code}: {answer.text.strip()[:200]}")
    # The witness's own line, checked under its configured key; other lines are ignored.
    return verified_cosignature(latest.note + answer.text, peer.key, ed25519_check)[1]


def _post(
    client: httpx.Client, store: ReadStore, peer: WitnessPeer, latest: SignedCheckpoint, old: int
) -> httpx.Response:
    proof = consistency_proof(old, latest.size, partial(read_nodes, store, live_tables()))
    lines = [f"old {old}"] + [base64.b64encode(h).decode() for h in proof]
    body = "\n".join(lines) + "\n\n" + latest.note
    return client.post(peer.url.rstrip("/") + "/add-checkpoint", content=body.encode())
