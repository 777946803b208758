"""GET /api/health says what the deployment can run, not only this process: an API
replica without TACHOGRAPH_TASK_COMMAND beside a worker with one (both stores)."""

from __future__ import annotations

from fastapi.testclient import TestClient

from api.app import create_app
from bootstrap import Services
from infra.settings import Settings
from tests.tasks.conftest import wait_until


def health(client: TestClient) -> dict[str, object]:
    response = client.get("/api/health")
    assert response.status_code == 200, response.text
    body: dict[str, object] = response.json()
    return body


def test_a_replica_without_an_executor_sees_the_workers_that_have_one(
    settings: Settings, executing: Services
) -> None:
    with TestClient(create_app(settings), raise_server_exceptions=False) as replica:
        body = health(replica)
        assert body["executor"] == "none"  # this process runs no agent
        # The worker's heartbeat names its slots (TACHOGRAPH_TASK_CONCURRENCY).
        assert wait_until(lambda: health(replica)["executors"] == {"live": 1, "slots": 2})

        executing.stop()  # a clean stop withdraws the worker's heartbeat
        assert health(replica)["executors"] == {"live": 0, "slots": 0}


def test_a_lone_server_without_an_executor_says_none_can_run(client: TestClient) -> None:
    body = health(client)
    assert body["executor"] == "none"
    assert body["executors"] == {"live": 0, "slots": 0}
