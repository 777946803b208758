"""Autonomy policy routes: every change is an AutonomySettings event with its actor."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from api.autonomy_schemas import AutonomySettingsUpdate
from api.deps import ActorDep, AutonomyDep, CommitDep, Consistent, StoreDep
from api.errors import ApiError
from api.input_limits import StrictJSONRoute
from projections.autonomy import autonomy_settings

router = APIRouter(prefix="/api/settings/autonomy", tags=["autonomy"], route_class=StrictJSONRoute)

_POLICIES = {
    "evolution": "evolution",
    "skillCreation": "skill_creation",
    "factRetention": "fact_retention",
    "selfUpdate": "self_update",
}


@router.get("")
def get_autonomy_settings(store: StoreDep, _: Consistent) -> dict[str, Any]:
    """The policy switches (all off by default) and the self-update task in flight, if any."""
    return autonomy_settings(store)


@router.patch("")
def update_autonomy_settings(
    body: AutonomySettingsUpdate,
    autonomy: AutonomyDep,
    store: StoreDep,
    actor: ActorDep,
    commit: CommitDep,
) -> dict[str, Any]:
    """Change switches; turning selfUpdate off stops new cycles before the next one starts."""
    changes: dict[str, bool] = {}
    for name in body.model_fields_set:
        value = getattr(body, name)
        if value is None:
            raise ApiError(422, "validation_error", f"{name}: must be true or false.")
        changes[_POLICIES[name]] = value
    recorded = autonomy.autonomy.update_settings(changes, actor)
    commit(recorded.position)
    return autonomy_settings(store)
