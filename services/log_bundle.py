"""Offline evidence bundles: one session's events, each with its inclusion proof, and the
signed checkpoint they prove against. Checking one needs the file and the log's note
verifier key only: no server, no database (docs/audit.md gives the format).
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from domain.application import Tachograph
from domain.cosignature import CosignerKey, verified_cosignature
from domain.merkle import ProofError, event_leaf, leaf_hash, verify_inclusion
from domain.signed_note import CheckpointBody, NoteError, VerifierKey, open_note
from infra.note_key import ed25519_check
from projections.store import ReadStore
from services.log_proofs import cosigned_note, inclusion, latest_checkpoint, witnessed_checkpoint
from services.session_export import session_export

BUNDLE_FORMAT = "tachograph-bundle/1"


class BundleError(ValueError):
    """The bundle does not verify; the message names what failed."""


def build_bundle(
    app: Tachograph, store: ReadStore, session_id: UUID, sign_head: Callable[[], object]
) -> dict[str, Any]:
    """The bundle of one session against a signed checkpoint with its cosignatures.

    The checkpoint is the largest that covers the session and that a witness cosigned,
    else the latest. `sign_head` is called when no signed checkpoint covers the
    session's last event yet; BundleError if none does even then.
    """
    records = session_export(app, store, session_id)
    if not records:
        raise BundleError(f"session {session_id} has no events")
    last = records[-1]["position"]
    checkpoint = witnessed_checkpoint(store, last) or latest_checkpoint(store)
    if checkpoint is None or checkpoint.position < last:
        sign_head()
        checkpoint = latest_checkpoint(store)
    if checkpoint is None or checkpoint.position < last:
        raise BundleError(f"no signed checkpoint covers position {last} yet")
    events = []
    for record in records:
        proof = inclusion(store, record["position"], checkpoint.size)
        stored = record["stored"]
        payload = (
            stored["data"].encode()
            if stored["encoding"] == "utf-8"
            else base64.b64decode(stored["data"])
        )
        events.append(
            {
                "position": record["position"],
                "aggregateId": record["aggregateId"],
                "version": record["version"],
                "type": record["type"],
                "stored": base64.b64encode(payload).decode(),
                "leafIndex": proof["leafIndex"],
                "hashes": proof["hashes"],
            }
        )
    return {
        "format": BUNDLE_FORMAT,
        "session": str(session_id),
        "checkpoint": cosigned_note(store, checkpoint),
        "events": events,
    }


@dataclass(frozen=True)
class BundleReport:
    origin: str
    tree_size: int
    events: int
    witnesses: int = 0
    cosigned_by: int = 0


def verify_bundle(text: str, key_text: str, witness_keys: Sequence[str] = ()) -> BundleReport:
    """Check a bundle against a note verifier key; BundleError naming the first failure.

    With witnesses' cosigner keys, also count which of them cosigned the checkpoint; a
    cosignature line of one of them that does not verify is a failure.
    """
    try:
        key = VerifierKey.parse(key_text)
        witnesses = [CosignerKey.parse(w) for w in witness_keys]
    except NoteError as exc:
        raise BundleError(f"key: {exc}") from None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise BundleError(f"bundle is not complete JSON (truncated?): {exc}") from None
    if not isinstance(doc, dict) or doc.get("format") != BUNDLE_FORMAT:
        raise BundleError(f"not a {BUNDLE_FORMAT} bundle")
    try:
        body = CheckpointBody.parse(open_note(str(doc.get("checkpoint")), key, ed25519_check))
    except NoteError as exc:
        raise BundleError(f"checkpoint: {exc}") from None
    if body.origin != key.name:
        raise BundleError(f"checkpoint: origin {body.origin!r} is not the key's log {key.name!r}")
    events = doc.get("events")
    if not isinstance(events, list) or not events:
        raise BundleError("bundle has no events")
    previous = 0
    for n, event in enumerate(events):
        where = f"event {n}" + (
            f" (position {event.get('position')})" if isinstance(event, dict) else ""
        )
        try:
            position = _check_event(event, body)
        except (BundleError, ProofError) as exc:
            raise BundleError(f"{where}: {exc}") from None
        if position <= previous:
            raise BundleError(f"{where}: positions must increase")
        previous = position
    return BundleReport(
        body.origin, body.size, len(events), len(witnesses), _cosigned_by(doc, witnesses)
    )


def _cosigned_by(doc: dict[str, Any], witnesses: Sequence[CosignerKey]) -> int:
    note, count = str(doc.get("checkpoint")), 0
    for witness in witnesses:
        if f"\u2014 {witness.name} " not in note:
            continue
        try:
            verified_cosignature(note, witness, ed25519_check)
        except NoteError as exc:
            raise BundleError(f"checkpoint: {exc}") from None
        count += 1
    return count


def _check_event(event: Any, body: CheckpointBody) -> int:
    fields = {"position": int, "aggregateId": str, "version": int, "type": str}
    fields |= {"stored": str, "leafIndex": int, "hashes": list}
    if not isinstance(event, dict):
        raise BundleError("not an object")
    for name, kind in fields.items():
        if not isinstance(event.get(name), kind) or isinstance(event.get(name), bool):
            raise BundleError(f"{name!r} missing or not a {kind.__name__}")
    try:
        payload = base64.b64decode(event["stored"], validate=True)
        hashes = [base64.b64decode(h, validate=True) for h in event["hashes"]]
    except (binascii.Error, TypeError):
        raise BundleError("'stored' or 'hashes' is not base64") from None
    data = event_leaf(
        event["position"], event["aggregateId"], event["version"], event["type"], payload
    )
    try:
        verify_inclusion(event["leafIndex"], body.size, leaf_hash(data), hashes, body.root)
    except ProofError:
        raise BundleError(
            f"not included in the signed tree of size {body.size}: "
            "the event or its proof was altered"
        ) from None
    return int(event["position"])
