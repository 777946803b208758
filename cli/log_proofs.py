"""`tachograph log key|prove` and `verify --bundle`: the Merkle proofs.

`log key` reads the key file only; `log prove` reads the read models as they are (no
catch-up: it appends nothing); `verify --bundle` touches no server and no database.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

from cli.log_presence import add_data_dir_option
from infra.settings import Settings


def add_parser(sub: Any) -> None:
    log = sub.add_parser("log", help="the log's note key and Merkle inclusion proofs")
    log_sub = log.add_subparsers(dest="log_command", required=True)
    key = log_sub.add_parser("key", help="print the note verifier key of signed checkpoints")
    add_data_dir_option(key)
    prove = log_sub.add_parser(
        "prove", help="one event with its inclusion proof against the latest signed checkpoint"
    )
    prove.add_argument("position", type=int)
    add_data_dir_option(prove)


def cli_log(settings: Settings, args: argparse.Namespace, out: TextIO) -> int:
    if args.log_command == "key":
        return _key(settings, out)
    return _prove(settings, args.position, out)


def _key(settings: Settings, out: TextIO) -> int:
    from infra.note_key import load_note_key

    key = load_note_key(settings.note_key_path, create=False)
    if key is None:
        print(
            f"tachograph log key: no note key at {settings.note_key_path} "
            "(serve or worker creates it on first start)",
            file=sys.stderr,
        )
        return 1
    out.write(key.verifier_key + "\n")
    return 0


def _prove(settings: Settings, position: int, out: TextIO) -> int:
    from cli.audit import open_stores
    from domain.errors import DomainError
    from infra.log_reader import event_record, read_events
    from services.log_proofs import inclusion, latest_checkpoint

    with open_stores(settings) as ctx:
        checkpoint = latest_checkpoint(ctx.store)
        if checkpoint is None:
            print("tachograph log prove: no signed checkpoint yet", file=sys.stderr)
            return 1
        try:
            proof = inclusion(ctx.store, position, checkpoint.size)
        except DomainError as exc:
            print(f"tachograph log prove: {exc}", file=sys.stderr)
            return 1
        notifications = read_events(ctx.app, position - 1, 1)
        event = event_record(ctx.app, notifications[0])
    from fastapi.encoders import jsonable_encoder

    doc = {"event": jsonable_encoder(event), "proof": proof, "checkpoint": checkpoint.note}
    out.write(json.dumps(doc, indent=2) + "\n")
    return 0


def cli_verify_bundle(
    path: str, key: str | None, out: TextIO, witnesses: Sequence[str] = ()
) -> int:
    """`tachograph verify --bundle FILE --key KEY`: 0 verified, 1 failed, 2 unusable input."""
    from services.log_bundle import BundleError, verify_bundle

    if key is None:
        print("tachograph verify: --bundle needs --key (the log's verifier key)", file=sys.stderr)
        return 2
    key_text = _key_text(key)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        print(f"tachograph verify: cannot read {path}: {exc}", file=sys.stderr)
        return 2
    try:
        report = verify_bundle(text, key_text, [_key_text(w) for w in witnesses])
    except BundleError as exc:
        out.write(f"FAILED: {exc}\n")
        return 1
    witnessed = (
        f"; witnessed by {report.cosigned_by} of {report.witnesses}" if report.witnesses else ""
    )
    out.write(
        f"OK: {report.events} events included in the tree of size {report.tree_size} "
        f"signed by {report.origin}{witnessed}\n"
    )
    return 0


def _key_text(key: str) -> str:
    """A key given on the command line, or the file holding it."""
    path = Path(key)
    return path.read_text(encoding="utf-8").strip() if path.is_file() else key


def cli_verify_kept(settings: Settings, path: str, key: str | None, out: TextIO) -> int:
    """`tachograph verify --checkpoint FILE [--key KEY]`: 0 the log extends every kept
    checkpoint, 1 it does not (naming where it changed), 2 unusable input."""
    from cli.audit import open_stores
    from domain.signed_note import NoteError, VerifierKey
    from infra.note_key import load_note_key
    from services.log_audit import check_kept_checkpoints

    try:
        notes = Path(path).read_text(encoding="utf-8")
        if key is not None:
            trusted = VerifierKey.parse(_key_text(key))
        else:
            own = load_note_key(settings.note_key_path, create=False)
            if own is None:
                raise NoteError("no --key given and no log note key here to check with")
            trusted = own.verifier()
    except (OSError, UnicodeDecodeError, NoteError) as exc:
        print(f"tachograph verify: --checkpoint {path}: {exc}", file=sys.stderr)
        return 2
    try:
        with open_stores(settings) as ctx:
            kept, divergence = check_kept_checkpoints(ctx.app, notes, trusted)
    except NoteError as exc:
        print(f"tachograph verify: --checkpoint {path}: {exc}", file=sys.stderr)
        return 2
    if divergence is not None:
        out.write(f"FAILED: {divergence.kind}: {divergence.describe()}\n")
        return 1
    largest = max(k.size for k in kept)
    out.write(
        f"OK: the log extends all {len(kept)} kept checkpoints (the largest of size "
        f"{largest}) signed by {trusted.name}\n"
    )
    return 0
