"""Fixtures for autonomy tests: an API client whose background jobs stay quiet, and an
autonomy runtime on a clock the test moves, driven by calling the job functions."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from bootstrap import Services
from infra.settings import Settings
from scheduler.autonomy import AutonomyRuntime
from scheduler.task_runtime import TaskRuntime
from tests.tasks.conftest import Clock

QUIET = {
    "reflection_interval_s": 3600.0,
    "self_update_idle_interval_s": 3600.0,
    "self_update_reconcile_interval_s": 3600.0,
}


@contextmanager
def quiet_client(settings: Settings, **changes: Any) -> Iterator[TestClient]:
    """A started app whose autonomy jobs never fire by themselves (tests call them)."""
    app = create_app(settings.with_(**{**QUIET, **changes}))
    with TestClient(app, raise_server_exceptions=False) as client:
        yield client


def services_of(client: TestClient) -> Services:
    services: Services = client.app.state.services  # type: ignore[attr-defined]
    return services


@dataclass
class Driven:
    """The API client plus an autonomy runtime (and tasks) on the test's clock."""

    client: TestClient
    services: Services
    clock: Clock
    tasks: TaskRuntime
    autonomy: AutonomyRuntime

    def settled(self) -> None:
        head = self.services.app.recorder.max_notification_id() or 0
        assert self.services.runner.wait_for(head, 10)


def drive(client: TestClient, clock: Clock, **kwargs: Any) -> Driven:
    services = services_of(client)
    tasks = TaskRuntime(services.settings, services.app, services.store, None, clock=clock)
    autonomy = AutonomyRuntime(
        services.settings,
        services.app,
        services.store,
        services.runner,
        services.transport,
        tasks,
        clock=clock,
        **kwargs,
    )
    return Driven(client, services, clock, tasks, autonomy)


@pytest.fixture
def api(settings: Settings) -> Iterator[TestClient]:
    with quiet_client(settings) as client:
        yield client


@pytest.fixture
def driven(api: TestClient, clock: Clock) -> Driven:
    return drive(api, clock)


@pytest.fixture
def clock() -> Clock:
    return Clock()


def enable(client: TestClient, **policies: bool) -> dict[str, Any]:
    response = client.patch("/api/settings/autonomy", json=policies)
    assert response.status_code == 200, response.text
    data: dict[str, Any] = response.json()
    return data


def post_signal(client: TestClient, expected: int = 201, **body: Any) -> dict[str, Any]:
    base = {"agentId": "claude", "traceId": "t1", "kind": "failure", "goal": "fix the build"}
    response = client.post("/api/autonomy/signals", json={**base, **body})
    assert response.status_code == expected, response.text
    data: dict[str, Any] = response.json()
    return data
