"""Audit integrity: verify the log's hash chain against the ledger, and checkpoints files."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from domain.application import Tachograph
from domain.log_chain import Checkpoint, signing_key_id
from domain.log_verify import VerifyReport, verify_chain
from infra.log_scan import count_events, log_head, scan_events, stored_position
from infra.log_wire import checkpoint_from_wire, checkpoint_wire
from projections.log_checkpoints import (
    all_checkpoints,
    chained_seq,
    recorded_links,
    recorded_position,
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
    against: Sequence[Checkpoint] | None = None,
    progress: Callable[[int], None] | None = None,
    on_total: Callable[[int], None] | None = None,
) -> VerifyReport:
    """Verify the stored log against the recorded chain and the ledger (or given checkpoints)."""
    # Read order matters while writers append: chain length first, then the ledger (which
    # then holds every checkpoint of that chain), then the head (which covers them all).
    chained = chained_seq(store, sys.maxsize) if against is None else 0
    checkpoints = all_checkpoints(store) if against is None else list(against)
    head = log_head(app)
    if on_total is not None:
        on_total(count_events(app, head))
    return verify_chain(
        scan_events(app, head),
        recorded_links(store, head),
        checkpoints,
        _Lookups(app, store),
        key=key,
        source="ledger" if against is None else "file",
        chained_seq=chained,
        progress=progress,
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
