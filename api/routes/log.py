"""Audit-integrity routes: the chain's checkpoints and a full verification of the stored log."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query
from fastapi.responses import PlainTextResponse

from api.deps import AppDep, Consistent, NoteKeyDep, SettingsDep, StoreDep
from api.input_limits import MAX_POSITION, StrictJSONRoute
from domain.errors import NotFound
from domain.log_chain import CHECKPOINT_INTERVAL, signing_key_id
from infra.log_wire import checkpoint_wire, verify_report_wire
from projections.log_checkpoints import list_checkpoints
from services.log_audit import verify_log
from services.log_proofs import consistency, cosigned_note, inclusion, latest_checkpoint

router = APIRouter(prefix="/api/log", tags=["auditors"], route_class=StrictJSONRoute)


@router.get("/checkpoints")
def checkpoints(
    store: StoreDep,
    settings: SettingsDep,
    limit: Annotated[int, Query(ge=1, le=200)] = 200,
    before_seq: Annotated[int | None, Query(alias="beforeSeq", ge=1, le=MAX_POSITION)] = None,
) -> dict[str, Any]:
    """Hash-chain checkpoints (every 1,000 events and at shutdown), newest first."""
    key = settings.log_signing_key
    items = [
        {**checkpoint_wire(c), "signatureState": c.signature_state(key)}
        for c in list_checkpoints(store, limit, before_seq)
    ]
    return {
        "items": items,
        "interval": CHECKPOINT_INTERVAL,
        "signingKeyId": signing_key_id(key) if key else None,
    }


@router.get("/verify")
def verify(app: AppDep, store: StoreDep, settings: SettingsDep, key: NoteKeyDep) -> dict[str, Any]:
    """Recompute the hash chain over the stored log; `ok` false names the first break."""
    report = verify_log(
        app,
        store,
        settings.log_signing_key,
        note_key=key.verifier() if key else None,
        witnesses=[peer.key for peer in settings.witnesses],
    )
    return verify_report_wire(report)


@router.get("/key", response_class=PlainTextResponse)
def note_key(key: NoteKeyDep) -> str:
    """The note verifier key of the log's signed checkpoints (`name+hash+key`)."""
    if key is None:
        raise NotFound("this process has no log note key")
    return key.verifier_key + "\n"


@router.get("/checkpoint", response_class=PlainTextResponse)
def checkpoint(store: StoreDep, _: Consistent) -> str:
    """The latest signed checkpoint: a C2SP tlog-checkpoint as a signed note, with the
    cosignatures of the witnesses that cosigned it so far."""
    latest = latest_checkpoint(store)
    if latest is None:
        raise NotFound("no signed checkpoint yet")
    return cosigned_note(store, latest)


@router.get("/proof/inclusion")
def inclusion_proof(
    store: StoreDep,
    _: Consistent,
    position: Annotated[int, Query(ge=1, le=MAX_POSITION)],
    tree_size: Annotated[int, Query(alias="treeSize", ge=1, le=MAX_POSITION)],
) -> dict[str, Any]:
    """RFC 6962 audit path of the event at `position` in the signed tree of `treeSize`."""
    return inclusion(store, position, tree_size)


@router.get("/proof/consistency")
def consistency_proof(
    store: StoreDep,
    _: Consistent,
    old: Annotated[int, Query(alias="from", ge=1, le=MAX_POSITION)],
    new: Annotated[int, Query(alias="to", ge=1, le=MAX_POSITION)],
) -> dict[str, Any]:
    """RFC 6962 proof that the signed tree of `from` is a prefix of the signed tree of `to`."""
    return consistency(store, old, new)
