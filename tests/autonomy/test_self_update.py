"""Self-update cycles on both stores (SPEC §8.4): reconcile, idle materialisation in
round-robin, the AutonomyGate held from materialisation to every terminal state."""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

from fastapi.testclient import TestClient

from domain.schedule import self_update_schedule_id
from domain.schedule_service import ScheduleService
from domain.self_update_service import SELF_UPDATE_PROMPT, SelfUpdatePlan, SelfUpdateService
from domain.task import Task
from tests.autonomy.conftest import Driven, drive, enable


def workspaces(client: TestClient, root: Any, *slugs: str, self_update: bool = True) -> None:
    for slug in slugs:
        (root / slug).mkdir()
        body = {"id": slug, "path": slug, "selfUpdate": self_update}
        assert client.post("/api/workspaces", json=body).status_code == 201


def reconcile(client: TestClient) -> dict[str, Any]:
    response = client.post("/api/autonomy/reconcile")
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def setup_cycles(driven: Driven, *slugs: str) -> None:
    workspaces(driven.client, driven.services.settings.workspace_root, *slugs)
    enable(driven.client, selfUpdate=True)
    driven.autonomy.reconcile()  # on the test's clock: each first slot is due at once
    driven.settled()


def idle(driven: Driven) -> Task | None:
    task_id = driven.autonomy.idle()
    driven.settled()
    return driven.tasks.service.find(task_id) if task_id else None


def finish(driven: Driven, task: Task, how: Callable[[UUID, int], Any] | None = None) -> None:
    claim = driven.tasks.service.claim(task.id, "test-worker")
    assert claim is not None
    if how is None:
        driven.tasks.service.complete(task.id, claim.attempt, "done")
    else:
        how(task.id, claim.attempt)
    driven.settled()


def gate_task(client: TestClient) -> str | None:
    task: str | None = client.get("/api/settings/autonomy").json()["selfUpdateTaskId"]
    return task


def test_reconcile_keeps_one_system_schedule_per_eligible_workspace(api: TestClient) -> None:
    root = api.app.state.services.settings.workspace_root  # type: ignore[attr-defined]
    workspaces(api, root, "alpha", "beta")
    workspaces(api, root, "gamma", self_update=False)
    first = reconcile(api)
    assert (first["created"], first["paused"]) == (["alpha", "beta"], [])
    rows = {r["workspaceId"]: r for r in first["items"]}
    assert set(rows) == {"alpha", "beta"}
    alpha = rows["alpha"]
    assert alpha["id"] == str(self_update_schedule_id("alpha"))
    assert (alpha["source"], alpha["cron"], alpha["prompt"]) == (
        "self-update",
        "0 * * * *",
        SELF_UPDATE_PROMPT,
    )
    assert reconcile(api)["created"] == [] and reconcile(api)["refreshed"] == []
    # beta stops being eligible: paused; eligible again: resumed.
    api.patch("/api/workspaces/beta", json={"selfUpdate": False})
    assert reconcile(api)["paused"] == ["beta"]
    api.patch("/api/workspaces/beta", json={"selfUpdate": True})
    back = reconcile(api)
    assert back["resumed"] == ["beta"]
    assert all(not r["paused"] and r["nextRunAt"] for r in back["items"])
    # An operator's pause is theirs: reconcile never resumes it.
    assert api.patch(f"/api/schedules/{alpha['id']}", json={"paused": True}).status_code == 200
    assert reconcile(api)["resumed"] == []
    assert api.get(f"/api/schedules/{alpha['id']}").json()["paused"] is True
    # A person may not edit the code-owned fields.
    refused = api.patch(f"/api/schedules/{alpha['id']}", json={"prompt": "mine"})
    assert (refused.status_code, refused.json()["error"]) == (409, "system_schedule")


def test_reconcile_refreshes_code_owned_fields(driven: Driven) -> None:
    setup_cycles(driven, "alpha")
    recut = drive(driven.client, driven.clock)
    recut.autonomy.self_update.plan = SelfUpdatePlan(cron="30 2 * * *", max_attempts=2)
    result = recut.autonomy.reconcile()
    assert result.refreshed == ["alpha"]
    driven.settled()
    row = driven.client.get(f"/api/schedules/{self_update_schedule_id('alpha')}").json()
    assert (row["cron"], row["maxAttempts"]) == ("30 2 * * *", 2)


def test_idle_cycles_go_round_robin_one_task_at_a_time(driven: Driven) -> None:
    setup_cycles(driven, "alpha", "beta", "gamma")
    first = idle(driven)
    assert first is not None
    assert (first.workspace, first.source, first.prompt) == (
        "alpha",
        "self-update",
        SELF_UPDATE_PROMPT,
    )
    assert first.schedule_id == str(self_update_schedule_id("alpha"))
    assert gate_task(driven.client) == str(first.id)
    assert idle(driven) is None  # a task is queued: not idle, and the gate is held
    finish(driven, first)
    # The next hour: alpha is due again, but beta and gamma never cycled.
    driven.clock.advance(3600)
    order = []
    for _ in range(3):
        task = idle(driven)
        assert task is not None and gate_task(driven.client) == str(task.id)
        order.append(task.workspace)
        finish(driven, task)
    assert order == ["beta", "gamma", "alpha"]
    assert idle(driven) is None  # nothing due before the next slot
    assert gate_task(driven.client) is None  # released when the last one completed
    rows = driven.client.get("/api/tasks?source=self-update").json()["items"]
    assert len(rows) == 4 and {r["status"] for r in rows} == {"completed"}
    assert driven.client.get("/api/settings/autonomy").json()["selfUpdateCycles"] == 4


def test_no_cycle_while_a_user_schedule_is_due_or_any_task_is_active(driven: Driven) -> None:
    setup_cycles(driven, "alpha")
    user_task = driven.tasks.service.create("default", "user work", None, 1, "t")
    driven.settled()
    assert idle(driven) is None
    driven.tasks.service.cancel(user_task.aggregate_id, "t")
    past = ScheduleService(
        driven.services.app,
        driven.tasks.schedules.fire_times,
        clock=lambda: driven.clock() - timedelta(minutes=1),
    )
    schedule = past.create("default", "due", "0 * * * *", "scheduled work", None, 1, "t")
    driven.settled()
    assert idle(driven) is None  # the user schedule's slot is due
    driven.tasks.schedules.update(schedule.aggregate_id, {}, True, "t")
    driven.settled()
    assert idle(driven) is not None


def test_the_gate_is_released_on_every_terminal_state(driven: Driven) -> None:
    setup_cycles(driven, "alpha", "beta", "gamma", "delta")
    service = driven.tasks.service
    # Cancelled while queued.
    cancelled = idle(driven)
    assert cancelled is not None
    service.cancel(cancelled.id, "operator")
    # Failed: its remediation may requeue it, so the gate waits for the remediation too.
    failed = idle(driven)
    assert failed is not None and failed.id != cancelled.id
    finish(driven, failed, lambda tid, n: service.fail(tid, n, "validation", "bad input"))
    assert idle(driven) is None and gate_task(driven.client) == str(failed.id)
    remediation = service.find(UUID(service.get(failed.id).remediation_task_id or ""))
    assert remediation is not None and remediation.source == "system"
    finish(driven, remediation)  # completes → the failed task is queued once more
    assert service.get(failed.id).status == "queued"
    assert idle(driven) is None and gate_task(driven.client) == str(failed.id)
    finish(driven, failed)
    # Dead-lettered after its transient retries: it cannot come back, so released at once.
    exhausted = idle(driven)
    assert exhausted is not None and failed.workspace != exhausted.workspace
    for _ in range(exhausted.max_attempts):
        finish(driven, exhausted, lambda tid, n: service.fail(tid, n, "provider", "overloaded"))
        driven.clock.advance(3600 * 24)
    assert service.get(exhausted.id).status == "dead-letter"
    assert idle(driven) is None  # released, but its remediation is queued: not idle
    assert gate_task(driven.client) is None
    remediation = service.find(UUID(service.get(exhausted.id).remediation_task_id or ""))
    assert remediation is not None
    service.cancel(remediation.id, "operator")
    driven.settled()
    assert idle(driven) is not None


def test_the_gate_admits_one_task_when_processes_race(driven: Driven) -> None:
    setup_cycles(driven, "alpha", "beta", "gamma", "delta")
    racers = [drive(driven.client, driven.clock) for _ in range(4)]
    barrier = threading.Barrier(len(racers))
    started: list[UUID | None] = []

    def race(runtime: Driven) -> None:
        barrier.wait()
        started.append(runtime.autonomy.idle())

    threads = [threading.Thread(target=race, args=(r,)) for r in racers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert len(started) == 4 and len([t for t in started if t is not None]) == 1
    driven.settled()
    assert len(driven.client.get("/api/tasks?source=self-update").json()["items"]) == 1


class DisableWhileMaterialising:
    """Schedules whose slot firing (mid-materialisation) first turns selfUpdate off."""

    def __init__(self, inner: ScheduleService, disable: Callable[[], Any]) -> None:
        self.inner = inner
        self.disable = disable

    def fire_times(self, cron: str) -> Callable[[datetime], datetime | None]:
        self.disable()
        return self.inner.fire_times(cron)

    def fire_slot(self, schedule: Any, due_at: datetime, now: datetime) -> Any:
        self.disable()
        return self.inner.fire_slot(schedule, due_at, now)


def test_disabling_self_update_stops_new_cycles_before_the_next_materialisation(
    driven: Driven,
) -> None:
    setup_cycles(driven, "alpha", "beta")
    running = idle(driven)
    assert running is not None
    enable(driven.client, selfUpdate=False)
    finish(driven, running)
    assert idle(driven) is None
    assert gate_task(driven.client) is None  # the gate is still released on completion
    assert len(driven.client.get("/api/tasks?source=self-update").json()["items"]) == 1
    # A disable that lands between the job's checks and its save: the save conflicts.
    enable(driven.client, selfUpdate=True)
    runtime = driven.autonomy
    racing = SelfUpdateService(
        driven.services.app,
        driven.tasks.service,
        DisableWhileMaterialising(
            driven.tasks.schedules,
            lambda: runtime.autonomy.update_settings({"self_update": False}, "operator"),
        ),  # type: ignore[arg-type]
        runtime.self_update.plan,
        clock=driven.clock,
    )
    candidates = [self_update_schedule_id("beta")]
    assert racing.materialise(candidates) is None
    driven.settled()
    assert driven.client.get("/api/settings/autonomy").json()["selfUpdate"] is False
    assert len(driven.client.get("/api/tasks?source=self-update").json()["items"]) == 1
    assert idle(driven) is None
