"""Schedules on both stores: cron in the server timezone, pause/resume, system rows,
materialisation once per slot (SPEC §5, §7.3)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from bootstrap import Services
from domain.schedule_service import ScheduleService
from domain.task import Task, scheduled_task_id
from infra.event_store import open_application
from infra.settings import Settings
from scheduler.cron import cron_fire_times
from tests.tasks.conftest import Clock, settled

ROW_FIELDS = {
    "id", "workspaceId", "source", "name", "cron", "prompt", "model", "maxAttempts",
    "paused", "nextRunAt", "lastRunAt", "lastTaskId", "createdAt", "updatedAt",
}  # fmt: skip


def create(client: TestClient, **body: Any) -> dict[str, Any]:
    base = {"workspaceId": "default", "name": "nightly", "cron": "0 3 * * *", "prompt": "Tidy up"}
    response = client.post("/api/schedules", json={**base, **body})
    assert response.status_code == 201, response.text
    data: dict[str, Any] = response.json()
    return data


def services_of(client: TestClient) -> Services:
    services: Services = client.app.state.services  # type: ignore[attr-defined]
    return services


def parse(at: str) -> datetime:
    return datetime.strptime(at, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)


def test_create_computes_the_next_run_in_utc(client: TestClient) -> None:
    before = datetime.now(UTC)
    schedule = create(client, cron="*/5 * * * *", model="m", maxAttempts=2)
    assert set(schedule) == ROW_FIELDS
    assert (schedule["source"], schedule["paused"], schedule["maxAttempts"]) == ("user", False, 2)
    assert (schedule["lastRunAt"], schedule["lastTaskId"]) == (None, None)
    next_run = parse(schedule["nextRunAt"])
    assert before < next_run <= before + timedelta(minutes=5)
    assert next_run.minute % 5 == 0 and next_run.second == 0


def test_cron_is_validated_and_timezone_is_refused(client: TestClient) -> None:
    for cron in ("61 * * * *", "* * * *", "* * * * * *", "0 0 30 2 *", "every day"):
        response = client.post(
            "/api/schedules",
            json={"workspaceId": "default", "name": "n", "cron": cron, "prompt": "p"},
        )
        assert response.status_code == 422, cron
        assert response.json()["error"] == "invalid_cron"
    with_timezone = client.post(
        "/api/schedules",
        json={
            "workspaceId": "default",
            "name": "n",
            "cron": "0 3 * * *",
            "prompt": "p",
            "timezone": "UTC",
        },
    )
    assert with_timezone.status_code == 422
    assert with_timezone.json()["error"] == "unknown_field"
    unknown = client.post(
        "/api/schedules",
        json={"workspaceId": "nope", "name": "n", "cron": "0 3 * * *", "prompt": "p"},
    )
    assert unknown.status_code == 404


@pytest.fixture
def kolkata_client(settings: Settings) -> Iterator[TestClient]:
    with TestClient(create_app(settings.with_(timezone="Asia/Kolkata"))) as client:
        yield client


def test_cron_runs_in_the_server_timezone(kolkata_client: TestClient) -> None:
    schedule = create(kolkata_client, cron="0 9 * * *")
    next_run = parse(schedule["nextRunAt"])
    assert (next_run.hour, next_run.minute) == (3, 30)  # 09:00 in UTC+05:30


def test_patch_fields_pause_and_resume(client: TestClient) -> None:
    schedule = create(client)
    sid = schedule["id"]
    changed = client.patch(
        f"/api/schedules/{sid}",
        json={
            "name": "hourly",
            "cron": "0 * * * *",
            "prompt": "Check",
            "maxAttempts": 5,
            "model": "m2",
        },
    )
    assert changed.status_code == 200
    body = changed.json()
    assert (body["name"], body["cron"], body["prompt"], body["maxAttempts"], body["model"]) == (
        "hourly",
        "0 * * * *",
        "Check",
        5,
        "m2",
    )
    assert parse(body["nextRunAt"]).minute == 0
    assert client.patch(f"/api/schedules/{sid}", json={"model": None}).json()["model"] is None
    paused = client.patch(f"/api/schedules/{sid}", json={"paused": True}).json()
    assert (paused["paused"], paused["nextRunAt"]) == (True, None)
    still = client.patch(f"/api/schedules/{sid}", json={"cron": "30 * * * *"}).json()
    assert (still["paused"], still["nextRunAt"], still["cron"]) == (True, None, "30 * * * *")
    resumed = client.patch(f"/api/schedules/{sid}", json={"paused": False}).json()
    assert resumed["paused"] is False and parse(resumed["nextRunAt"]).minute == 30
    for bad in ({"name": None}, {"cron": "nope"}, {"timezone": "UTC"}, {"maxAttempts": 0}):
        assert client.patch(f"/api/schedules/{sid}", json=bad).status_code == 422, bad
    listed = client.get("/api/schedules").json()["items"]
    assert [s["id"] for s in listed] == [sid]


def test_delete_user_schedule(client: TestClient) -> None:
    first, second = create(client), create(client, name="other")
    assert [s["id"] for s in client.get("/api/schedules").json()["items"]] == [
        second["id"],
        first["id"],
    ]
    assert client.delete(f"/api/schedules/{first['id']}").status_code == 204
    assert client.get(f"/api/schedules/{first['id']}").status_code == 404
    assert client.patch(f"/api/schedules/{first['id']}", json={"paused": True}).status_code == 404
    assert client.delete(f"/api/schedules/{first['id']}").status_code == 404


def test_system_schedules_accept_only_paused_and_refuse_deletion(client: TestClient) -> None:
    runtime = services_of(client).tasks
    assert runtime is not None
    recorded = runtime.schedules.ensure_system_schedule("default", "0 4 * * *", "Improve", None, 2)
    sid = str(recorded.aggregate_id)
    row = client.get(f"/api/schedules/{sid}", params={"minPosition": recorded.position}).json()
    assert (row["source"], row["cron"]) == ("self-update", "0 4 * * *")
    paused = client.patch(f"/api/schedules/{sid}", json={"paused": True})
    assert paused.status_code == 200 and paused.json()["paused"] is True
    for change in (
        {"name": "mine"},
        {"prompt": "x"},
        {"cron": "0 5 * * *"},
        {"paused": False, "model": "m"},
    ):
        refused = client.patch(f"/api/schedules/{sid}", json=change)
        assert refused.status_code == 409, change
        assert refused.json()["error"] == "system_schedule"
    deletion = client.delete(f"/api/schedules/{sid}")
    assert (deletion.status_code, deletion.json()["error"]) == (409, "system_schedule")
    # The code still refreshes its own fields.
    runtime.schedules.ensure_system_schedule("default", "0 5 * * *", "Improve more", "m", 3)
    settled(services_of(client))
    refreshed = client.get(f"/api/schedules/{sid}").json()
    assert (refreshed["cron"], refreshed["prompt"], refreshed["paused"]) == (
        "0 5 * * *",
        "Improve more",
        True,
    )


def past_schedule(services: Services, clock: Clock) -> UUID:
    """A user schedule created an hour ago, so its first slot is already due."""
    service = ScheduleService(services.app, cron_fire_times("UTC"), clock=clock)
    clock.now = datetime.now(UTC) - timedelta(hours=1)
    return service.create("default", "every minute", "* * * * *", "Run", "m", 4, "t").aggregate_id


def test_materialisation_queues_one_task_per_slot(services: Services, clock: Clock) -> None:
    schedule_id = past_schedule(services, clock)
    runtime = services.tasks
    assert runtime is not None
    due = runtime.schedules.get(schedule_id).next_run_at
    assert due is not None
    settled(services)
    created = runtime.materialise_due()
    assert created == [scheduled_task_id(schedule_id, due)]
    task = runtime.service.get(created[0])
    assert (task.source, task.schedule_id, task.max_attempts, task.model, task.prompt) == (
        "schedule",
        str(schedule_id),
        4,
        "m",
        "Run",
    )
    schedule = runtime.schedules.get(schedule_id)
    assert schedule.last_run_at == due and schedule.last_task_id == str(created[0])
    # Missed slots are coalesced: the next run is in the future.
    assert schedule.next_run_at is not None and schedule.next_run_at > datetime.now(UTC)
    settled(services)
    assert runtime.materialise_due() == []


def test_paused_schedules_are_not_materialised(services: Services, clock: Clock) -> None:
    schedule_id = past_schedule(services, clock)
    assert services.tasks is not None
    services.tasks.schedules.update(schedule_id, {}, True, "t")
    settled(services)
    assert services.tasks.materialise_due() == []
    assert services.tasks.schedules.materialise(schedule_id) is None


def test_two_concurrent_materialisers_create_the_task_once(
    services: Services, clock: Clock
) -> None:
    schedule_id = past_schedule(services, clock)
    barrier = threading.Barrier(2)

    class Racing(ScheduleService):
        def get(self, schedule_id: UUID) -> Any:
            found = super().get(schedule_id)
            barrier.wait(5)  # both load the same version of the schedule first
            return found

    other_app = open_application(services.settings)
    try:
        racers = [Racing(app, cron_fire_times("UTC")) for app in (services.app, other_app)]
        results: list[UUID | None] = [None, None]

        def run(i: int) -> None:
            results[i] = racers[i].materialise(schedule_id)

        threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        other_app.close()
    winners = [r for r in results if r is not None]
    assert len(winners) == 1
    assert isinstance(services.app.repository.get(winners[0]), Task)
    assert services.app.repository.get(schedule_id).last_task_id == str(winners[0])
