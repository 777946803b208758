"""Audit-integrity routes: the chain's checkpoints and a full verification of the stored log."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query

from api.deps import AppDep, SettingsDep, StoreDep
from api.input_limits import MAX_POSITION, StrictJSONRoute
from domain.log_chain import CHECKPOINT_INTERVAL, signing_key_id
from infra.log_wire import checkpoint_wire, verify_report_wire
from projections.log_checkpoints import list_checkpoints
from services.log_audit import verify_log

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
def verify(app: AppDep, store: StoreDep, settings: SettingsDep) -> dict[str, Any]:
    """Recompute the hash chain over the stored log; `ok` false names the first break."""
    report = verify_log(app, store, settings.log_signing_key)
    return verify_report_wire(report)
