"""Dependencies as Annotated aliases: services, actor, read-your-writes."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Header, Query, Request, Response

from api.auth import request_principal
from api.errors import ApiError
from api.input_limits import MAX_POSITION
from bootstrap import Services
from services.credentials import Principal


# Dependencies that never block are async: FastAPI runs sync ones in the thread
# pool, a measurable cost on the ingest hot path.
async def get_services(request: Request) -> Services:
    services: Services = request.app.state.services
    return services


ServicesDep = Annotated[Services, Depends(get_services)]


async def get_principal(request: Request) -> Principal:
    """The caller, as api/auth.py authenticated it."""
    return request_principal(request)


PrincipalDep = Annotated[Principal, Depends(get_principal)]


async def get_actor(request: Request) -> str:
    """Who causes the command's events: `key:<label>`, `agent:...`, `task:...`, `anonymous`."""
    return request_principal(request).actor


ActorDep = Annotated[str, Depends(get_actor)]


def wait_min_position(
    services: ServicesDep,
    min_position: Annotated[int | None, Query(alias="minPosition", ge=0, le=MAX_POSITION)] = None,
    header_position: Annotated[
        int | None, Header(alias="x-tachograph-min-position", ge=0, le=MAX_POSITION)
    ] = None,
) -> None:
    """Hold a read until the projections have processed the requested position (≤ 5 s)."""
    wanted = max(min_position or 0, header_position or 0)
    limit = services.settings.read_wait_s
    if wanted > services.runner.position:
        head = services.app.recorder.max_notification_id() or 0
        if wanted > head:
            # No wait can help: commands only ever hand out positions already in the log.
            raise ApiError(
                422,
                "position_not_in_log",
                f"Position {wanted} is beyond the end of the log ({head}); "
                "send a position a command returned.",
                position=head,
            )
    if wanted and not services.runner.wait_for(wanted, limit):
        raise ApiError(
            503,
            "projection_lagging",
            f"Read models have not reached position {wanted} within {limit:g} s; retry.",
            position=services.runner.position,
        )


Consistent = Annotated[None, Depends(wait_min_position)]


def committed(services: Services, response: Response, position: int | None) -> int:
    """Wait for a command's own position in the read models and put it in the header."""
    if position is None:
        # A no-op command appended nothing; report the log position it observed.
        position = services.runner.position
    elif not services.runner.wait_for(position, services.settings.read_wait_s):
        raise ApiError(
            503,
            "projection_lagging",
            f"The command was recorded at position {position}, but read models lag; "
            "read again with minPosition.",
            position=position,
        )
    response.headers["x-tachograph-position"] = str(position)
    return position
