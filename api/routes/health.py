"""Operations routes."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from api.deps import AppDep, IngestDep, RunnerDep, SchedulerDep, SettingsDep, TasksDep
from api.input_limits import StrictJSONRoute
from domain.approval_rules import longest_hold_s
from scheduler.task_runtime import TaskRuntime

router = APIRouter(tags=["operations"], route_class=StrictJSONRoute)


def _live_executors(tasks: TaskRuntime) -> dict[str, int] | None:
    try:
        return tasks.registry.live_executors()
    except Exception:  # noqa: BLE001 - health answers whatever it cannot read as unknown
        return None


@router.get("/api/health", response_model=None)
def health(
    app: AppDep,
    runner: RunnerDep,
    scheduler: SchedulerDep,
    ingest: IngestDep,
    tasks: TasksDep,
    settings: SettingsDep,
) -> JSONResponse:
    """Liveness and lag: 503 with the same body when the database is unreachable."""
    body: dict[str, Any] = {"status": "ok", "database": "ok"}
    try:
        head = app.recorder.max_notification_id() or 0
        positions = runner.positions()
    except Exception:  # noqa: BLE001 - any failure to reach the store means unavailable
        head, positions = None, {}
        body["status"] = "unavailable"
        body["database"] = "unreachable"
    body["projections"] = {
        name: {"position": pos, "lag": max(head - pos, 0) if head is not None else None}
        for name, pos in positions.items()
    }
    body["scheduler"] = scheduler.state
    body["executor"] = "command" if settings.task_command else "none"
    # How long a hook request may be held for an operator: hooks must wait longer.
    # An active policy's `ask` rules count too (docs/policy.md: re-install hooks after
    # activating a longer one).
    held = longest_hold_s(ingest.approvals.rules, ingest.config.handlers)
    policy = ingest.rules.policy
    body["longestHoldS"] = max(held, policy.longest_hold_s() if policy is not None else 0)
    # What the deployment runs: an API replica without an executor beside workers with one.
    body["executors"] = _live_executors(tasks) if head is not None else None
    return JSONResponse(body, status_code=200 if head is not None else 503)
