"""Audit integrity: verify the log's hash chain against the ledger, and checkpoints files."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

from domain.application import Tachograph
from domain.cosignature import CosignerKey, verified_cosignature
from domain.kept_checkpoints import Divergence, KeptRoot, first_divergence, split_notes
from domain.log_chain import Checkpoint, signing_key_id
from domain.log_verify import FORGED_CHECKPOINT, ChainBreak, VerifyReport, verify_chain
from domain.merkle import root_hash
from domain.merkle_verify import MERKLE_MISMATCH, SignedRoot, TreeAudit, first_leaf_mismatch
from domain.signed_note import CheckpointBody, NoteError, VerifierKey, open_note
from infra.log_scan import count_events, log_head, scan_events, stored_position
from infra.log_wire import checkpoint_from_wire, checkpoint_wire
from infra.note_key import ed25519_check
from projections.log_checkpoints import (
    all_checkpoints,
    chained_seq,
    recorded_links,
    recorded_position,
)
from projections.log_cosignatures import all_cosignatures
from projections.log_tree import (
    live_tables,
    read_nodes,
    recorded_leaves,
    signed_notes,
    tree_size,
)
from projections.store import ReadStore

CHECKPOINTS_FORMAT = "tachograph-checkpoints/1"


@dataclass(frozen=True)
class _Lookups:
    app: Tachograph
    store: ReadStore

    def recorded_position(self, aggregate_id: str, version: int) -> int | None:
        return recorded_position(self.store, aggregate_id, version)

    def stored_position(self, aggregate_id: str, version: int) -> int | None:
        return stored_position(self.app, aggregate_id, version)


def verify_log(
    app: Tachograph,
    store: ReadStore,
    key: str | None,
    *,
    note_key: VerifierKey | None = None,
    witnesses: Sequence[CosignerKey] = (),
    against: Sequence[Checkpoint] | None = None,
    progress: Callable[[int], None] | None = None,
    on_total: Callable[[int], None] | None = None,
) -> VerifyReport:
    """Verify the stored log against the recorded chain and the ledger (or given checkpoints)."""
    # Read order matters while writers append: chain length first, then the ledger (which
    # then holds every checkpoint of that chain), then the head (which covers them all).
    chained = chained_seq(store, sys.maxsize) if against is None else 0
    checkpoints = all_checkpoints(store) if against is None else list(against)
    roots, forged = _signed_roots(store, note_key)
    tree = TreeAudit(roots, compare_at=tree_size(store))
    head = log_head(app)
    if on_total is not None:
        on_total(count_events(app, head))
    report = verify_chain(
        tree.scan(scan_events(app, head)),
        recorded_links(store, head),
        checkpoints,
        _Lookups(app, store),
        key=key,
        source="ledger" if against is None else "file",
        chained_seq=chained,
        progress=progress,
    )
    if tree.root_at_compare is not None:
        try:
            recorded = root_hash(tree.compare_at, partial(read_nodes, store, live_tables()))
        except LookupError:
            recorded = b""
        if tree.read_model_differs(recorded):
            # Only now read the recorded leaves, to name the first that differs.
            report.chain_break = min(
                (
                    b
                    for b in (
                        report.chain_break,
                        first_leaf_mismatch(scan_events(app, head), recorded_leaves(store, head))
                        or ChainBreak(head, MERKLE_MISMATCH, "the tree's subtrees do not match"),
                    )
                    if b is not None
                ),
                key=lambda b: b.position,
            )
    _add_tree_audit(report, tree, forged, note_key)
    _add_assurance(report, store, tree.roots if note_key else [], witnesses)
    return report


def _add_assurance(
    report: VerifyReport,
    store: ReadStore,
    verified: Sequence[SignedRoot],
    witnesses: Sequence[CosignerKey],
) -> None:
    """Which configured witnesses validly cosigned a checkpoint whose signature held."""
    report.witnesses = len(witnesses)
    report.assurance = "signed" if verified else "unsigned"
    notes = {size: note for size, _, note in signed_notes(store)}
    sizes = {root.size for root in verified}
    keys = {key.name: key for key in witnesses}
    cosigned: set[str] = set()
    for size, name, line in all_cosignatures(store):
        key = keys.get(name)
        if key is None or size not in sizes or name in cosigned:
            continue
        try:
            verified_cosignature(notes[size] + line, key, ed25519_check)
        except NoteError as exc:
            report.warnings.append(f"The cosignature of size {size} does not verify: {exc}")
            continue
        cosigned.add(name)
    report.cosigned_by = len(cosigned)
    if cosigned:
        report.assurance = "witnessed"


def _signed_roots(
    store: ReadStore, key: VerifierKey | None
) -> tuple[list[SignedRoot], list[ChainBreak]]:
    """The ledger's signed checkpoints whose signature holds, and breaks for the others."""
    roots, forged = [], []
    for size, position, note in signed_notes(store):
        try:
            text = open_note(note, key, ed25519_check) if key else note.split("\n\n")[0] + "\n"
            body = CheckpointBody.parse(text)
            if body.size != size:
                raise NoteError(f"its text says size {body.size}")
        except NoteError as exc:
            message = f"the signed checkpoint of size {size} does not verify: {exc}"
            forged.append(ChainBreak(position, FORGED_CHECKPOINT, message, seq=size))
            continue
        roots.append(SignedRoot(size, body.root, position))
    return roots, forged


def _add_tree_audit(
    report: VerifyReport, tree: TreeAudit, forged: list[ChainBreak], key: VerifierKey | None
) -> None:
    """Fold the Merkle check into the report: the earliest break of either wins."""
    report.merkle_leaves, report.signed_roots = tree.leaves, len(tree.roots) + len(forged)
    report.signed_roots_checked = tree.roots_checked
    complete = report.chain_break is None
    found = [b for b in (report.chain_break, *forged) if b is not None]
    problem = tree.tail_problem(report.head_position) if complete else tree.problem
    if problem is not None:
        found.append(problem)
    report.chain_break = min(found, key=lambda b: b.position) if found else None
    if key is None and report.signed_roots:
        report.warnings.append(
            "No log note key here: the signatures of signed checkpoints were not checked."
        )
    if tree.compare_at < tree.leaves:
        report.warnings.append(
            f"The Merkle tree covers {tree.compare_at} events so far (catching up); "
            "later events were hashed but not compared with it."
        )


def checkpoints_document(store: ReadStore, key: str | None) -> dict[str, Any]:
    """Every checkpoint, oldest first, in the file format auditors keep."""
    return {
        "format": CHECKPOINTS_FORMAT,
        "exportedAt": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
        "signingKeyId": signing_key_id(key) if key else None,
        "checkpoints": [checkpoint_wire(c) for c in all_checkpoints(store)],
    }


def load_checkpoints(path: Path) -> list[Checkpoint]:
    """Parse an exported checkpoints file; ValueError with a reason when it is not one."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"cannot read {path}: {exc}") from None
    if not isinstance(doc, dict) or doc.get("format") != CHECKPOINTS_FORMAT:
        raise ValueError(f"{path} is not a {CHECKPOINTS_FORMAT} file")
    items = doc.get("checkpoints")
    if not isinstance(items, list):
        raise ValueError(f"{path}: 'checkpoints' must be a list")
    return [checkpoint_from_wire(item) for item in items]


def check_kept_checkpoints(
    app: Tachograph, notes: str, key: VerifierKey
) -> tuple[list[KeptRoot], Divergence | None]:
    """The log against checkpoints an auditor kept (signed notes, one after another).

    Every note must verify under `key` (the key the auditor trusts) and name its log;
    NoteError naming the first that does not. Then the stored events are hashed as
    leaves and the first kept root they no longer reproduce is named (None: all match).
    """
    kept = []
    for n, note in enumerate(split_notes(notes), start=1):
        try:
            body = CheckpointBody.parse(open_note(note, key, ed25519_check))
        except NoteError as exc:
            raise NoteError(f"kept checkpoint {n}: {exc}") from None
        if body.origin != key.name:
            raise NoteError(f"kept checkpoint {n}: origin {body.origin!r} is not {key.name!r}")
        kept.append(KeptRoot(body.size, body.root))
    if not kept:
        raise NoteError("no signed checkpoint in the file")
    return kept, first_divergence(scan_events(app, log_head(app)), kept)
