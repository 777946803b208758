"""The camelCase shapes of the log's checkpoints and verification reports.

A checkpoint has one shape in `GET /api/log/checkpoints`, in exported checkpoint files
and in what `tachograph audit` reads back; a verification report one shape in
`GET /api/log/verify` and `tachograph audit verify --json`.
"""

from __future__ import annotations

from typing import Any

from domain.log_chain import PERIODIC, Checkpoint
from domain.log_verify import ChainBreak, VerifyReport


def checkpoint_wire(checkpoint: Checkpoint) -> dict[str, object]:
    return {
        "seq": checkpoint.seq,
        "position": checkpoint.position,
        "link": checkpoint.link,
        "kind": checkpoint.kind,
        "keyId": checkpoint.key_id,
        "signature": checkpoint.signature,
        "recordedAt": checkpoint.recorded_at,
    }


def checkpoint_from_wire(raw: dict[str, object]) -> Checkpoint:
    """Parse the wire/file shape; raises ValueError on anything malformed."""
    try:
        seq, position, link = raw["seq"], raw["position"], raw["link"]
        if not (isinstance(seq, int) and isinstance(position, int) and isinstance(link, str)):
            raise ValueError("seq and position must be integers, link a string")
        bytes.fromhex(link)
        return Checkpoint(
            seq=seq,
            position=position,
            link=link,
            kind=str(raw.get("kind") or PERIODIC),
            key_id=_opt_str(raw.get("keyId")),
            signature=_opt_str(raw.get("signature")),
            recorded_at=_opt_str(raw.get("recordedAt")),
        )
    except (KeyError, TypeError) as exc:
        raise ValueError(f"malformed checkpoint {raw!r}: {exc}") from None


def _opt_str(value: object) -> str | None:
    return None if value is None else str(value)


def chain_break_wire(chain_break: ChainBreak) -> dict[str, Any]:
    return {
        "position": chain_break.position,
        "kind": chain_break.kind,
        "seq": chain_break.seq,
        "message": chain_break.message,
    }


def verify_report_wire(report: VerifyReport) -> dict[str, Any]:
    return {
        "ok": report.ok,
        "source": report.source,
        "events": report.events,
        "head": {"position": report.head_position, "link": report.head_link},
        "chainedThrough": report.chained_through,
        "checkpoints": {
            "total": report.checkpoints,
            "checked": report.checkpoints_checked,
            "signed": report.signed,
            "unsigned": report.unsigned,
        },
        "merkle": {
            "leaves": report.merkle_leaves,
            "signedCheckpoints": report.signed_roots,
            "checked": report.signed_roots_checked,
        },
        "assurance": {
            "level": report.assurance,
            "cosignedBy": report.cosigned_by,
            "witnesses": report.witnesses,
        },
        "break": chain_break_wire(report.chain_break) if report.chain_break else None,
        "warnings": report.warnings,
    }
