"""Credentials: issue, list and revoke keys (admin only), and who the caller is."""

from __future__ import annotations

import secrets
from typing import Annotated, Any, Literal
from uuid import UUID

from fastapi import APIRouter, Query, Response
from pydantic import Field

from api.deps import ActorDep, Consistent, PrincipalDep, ServicesDep, committed
from api.errors import ApiError
from api.input_limits import StrictJSONRoute
from api.schemas import Slug, Strict
from domain.credentials import AGENT, Binding, parse_lifetime
from domain.errors import NotFound
from projections.api_keys import get_key, list_keys

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
    body: KeyCreate, services: ServicesDep, actor: ActorDep, response: Response
) -> dict[str, Any]:
    """Issue a credential; the answer's `secret` is shown this once and never again."""
    if body.label is None and body.role != AGENT:
        raise ApiError(422, "validation_error", "label: a label is required for this role.")
    issued = services.keys.issue(
        body.label or agent_label(),
        body.role,
        actor,
        lifetime=parse_lifetime(body.expiresIn) if body.expiresIn else None,
        binding=Binding(
            session_id=str(body.sessionId) if body.sessionId else None,
            workspace_id=body.workspaceId,
        ),
    )
    committed(services, response, issued.recorded.position)
    services.credentials.refresh()  # usable on this replica the moment the answer arrives
    return {**_read(services, issued.label), "secret": issued.secret}


@router.get("/api/keys")
def keys(
    services: ServicesDep,
    _: Consistent,
    limit: Annotated[int, Query(ge=1, le=200)] = 200,
) -> dict[str, Any]:
    """Credentials newest first: label, role, binding, created, expires, last used, revoked."""
    return {"items": list_keys(services.store, limit)}


@router.post("/api/keys/{label}/revoke")
def revoke_key(
    label: Label,
    services: ServicesDep,
    actor: ActorDep,
    response: Response,
    body: KeyRevoke | None = None,
) -> dict[str, Any]:
    """Revoke a credential: refused by every replica within a second."""
    recorded = services.keys.revoke(label, actor, body.reason if body else None)
    committed(services, response, recorded.position)
    services.credentials.refresh()  # refused here at once; other replicas within a second
    return _read(services, label)


@router.get("/api/whoami")
async def whoami(services: ServicesDep, principal: PrincipalDep) -> dict[str, Any]:
    """The credential in use: its label, role, actor and binding (the operator page asks)."""
    return principal.as_wire(services.credentials.auth_required)


def _read(services: ServicesDep, label: str) -> dict[str, Any]:
    row = get_key(services.store, label)
    if row is None:
        raise NotFound(f"Key {label!r} does not exist.")
    return row
