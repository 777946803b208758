"""Every live projection, in the order the runner applies them."""

from __future__ import annotations

from projections.activity import ActivityProjection
from projections.api_keys import ApiKeysProjection
from projections.approvals import ApprovalsProjection
from projections.autonomy import AutonomySettingsProjection
from projections.base import Projection
from projections.deliveries import DeliveriesProjection
from projections.hook_audit import HookAuditProjection
from projections.learned import LearnedProjection
from projections.log_checkpoints import LogChainProjection
from projections.policies import PoliciesProjection
from projections.schedules import SchedulesProjection
from projections.self_update_cycles import SelfUpdateCyclesProjection
from projections.sessions import SessionsProjection
from projections.signals import SignalsProjection
from projections.tasks import TaskActivityProjection, TasksProjection
from projections.timeline import TimelineProjection
from projections.turn_signals import TurnSignalsProjection
from projections.usage import UsageProjection
from projections.workspaces import WorkspacesProjection

PROJECTION_TYPES: tuple[type[Projection], ...] = (
    WorkspacesProjection,
    SessionsProjection,
    HookAuditProjection,
    TimelineProjection,
    ActivityProjection,
    LogChainProjection,
    TasksProjection,
    TaskActivityProjection,
    SchedulesProjection,
    AutonomySettingsProjection,
    SignalsProjection,
    TurnSignalsProjection,
    LearnedProjection,
    DeliveriesProjection,
    ApiKeysProjection,
    SelfUpdateCyclesProjection,
    ApprovalsProjection,
    PoliciesProjection,
    UsageProjection,
)


def all_projections(prefix: str = "rm_") -> list[Projection]:
    """Fresh instances of every projection writing to tables with this prefix."""
    return [cls(prefix) for cls in PROJECTION_TYPES]
