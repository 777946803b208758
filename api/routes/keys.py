"""Credentials: issue, list and revoke keys (admin only), and who the caller is."""

from __future__ import annotations

import secrets
from typing import Annotated, Any, Literal
from uuid import UUID

from fastapi import APIRouter, Query
from pydantic import Field

from api.deps import (
    ActorDep,
    CommitDep,
    Consistent,
    CredentialsDep,
    KeysDep,
    PrincipalDep,
    StoreDep,
)
from api.errors import ApiError
from api.input_limits import StrictJSONRoute
from api.schemas import Slug, Strict
from domain.credentials import AGENT, Binding, parse_lifetime
from domain.errors import NotFound
from projections.api_keys import get_key, list_keys
from projections.store import ReadStore

router = APIRouter(tags=["credentials"], route_class=StrictJSONRoute)

Label = Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9._-]{0,62}$")]


class KeyCreate(Strict):
    label: Label | None = None  # agent tokens get one made up when it is left out
    role: Literal["agent", "reader", "operator", "admin"]
    expiresIn: Annotated[str, Field(max_length=16)] | None = None
    sessionId: UUID | None = None
    workspaceId: Slug | None = None


class KeyRevoke(Strict):
    reason: Annotated[str, Field(max_length=500)] | None = None


def agent_label() -> str:
    return f"agent-{secrets.token_hex(4)}"


@router.post("/api/keys", status_code=201)
def issue_key(
    body: KeyCreate,
    key_service: KeysDep,
    credentials: CredentialsDep,
    store: StoreDep,
    actor: ActorDep,
    commit: CommitDep,
) -> dict[str, Any]:
    """Issue a credential; the answer's `secret` is shown this once and never again."""
    if body.label is None and body.role != AGENT:
        raise ApiError(422, "validation_error", "label: a label is required for this role.")
    issued = key_service.issue(
        body.label or agent_label(),
        body.role,
        actor,
        lifetime=parse_lifetime(body.expiresIn) if body.expiresIn else None,
        binding=Binding(
            session_id=str(body.sessionId) if body.sessionId else None,
            workspace_id=body.workspaceId,
        ),
    )
    commit(issued.recorded.position)
    credentials.refresh()  # usable on this replica the moment the answer arrives
    return {**_read(store, issued.label), "secret": issued.secret}


@router.get("/api/keys")
def keys(
    store: StoreDep,
    _: Consistent,
    limit: Annotated[int, Query(ge=1, le=200)] = 200,
) -> dict[str, Any]:
    """Credentials newest first: label, role, binding, created, expires, last used, revoked."""
    return {"items": list_keys(store, limit)}


@router.post("/api/keys/{label}/revoke")
def revoke_key(
    label: Label,
    key_service: KeysDep,
    credentials: CredentialsDep,
    store: StoreDep,
    actor: ActorDep,
    commit: CommitDep,
    body: KeyRevoke | None = None,
) -> dict[str, Any]:
    """Revoke a credential: refused by every replica within a second."""
    recorded = key_service.revoke(label, actor, body.reason if body else None)
    commit(recorded.position)
    credentials.refresh()  # refused here at once; other replicas within a second
    return _read(store, label)


@router.get("/api/whoami")
async def whoami(credentials: CredentialsDep, principal: PrincipalDep) -> dict[str, Any]:
    """The credential in use: its label, role, actor and binding (the operator page asks)."""
    return principal.as_wire(credentials.auth_required)


def _read(store: ReadStore, label: str) -> dict[str, Any]:
    row = get_key(store, label)
    if row is None:
        raise NotFound(f"Key {label!r} does not exist.")
    return row
