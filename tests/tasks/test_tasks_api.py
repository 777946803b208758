"""Task routes on both stores: every transition, every 409, a board without activity."""

from __future__ import annotations

import json
from typing import Any
from uuid import UUID

from fastapi.testclient import TestClient

from bootstrap import Services
from domain.task_policy import RECORD_LIMIT_BYTES
from domain.task_service import Claim, TaskService

ROW_FIELDS = {
    "id", "workspaceId", "source", "kind", "status", "prompt", "model", "scheduleId",
    "parentTaskId", "remediationTaskId", "attemptCount", "maxAttempts", "nextAttemptAt",
    "lastErrorClass", "lastError", "outcome", "resolution", "deadLetteredAt", "sessionId",
    "interrupted", "createdAt", "updatedAt", "startedAt", "finishedAt",
}  # fmt: skip


def services_of(client: TestClient) -> Services:
    services: Services = client.app.state.services  # type: ignore[attr-defined]
    return services


def service_of(client: TestClient) -> TaskService:
    tasks = services_of(client).tasks
    assert tasks is not None
    return tasks.service


def create(client: TestClient, **body: Any) -> dict[str, Any]:
    response = client.post("/api/tasks", json={"workspaceId": "default", "prompt": "Do it", **body})
    assert response.status_code == 201, response.text
    data: dict[str, Any] = response.json()
    return data


def claim(client: TestClient, task_id: str) -> Claim:
    """Start an attempt as an executor would (this app runs no executor)."""
    claimed = service_of(client).claim(UUID(task_id), "test-worker")
    assert claimed is not None
    return claimed


def get(client: TestClient, task_id: str) -> dict[str, Any]:
    position = services_of(client).app.recorder.max_notification_id()
    response = client.get(f"/api/tasks/{task_id}", params={"minPosition": position})
    assert response.status_code == 200, response.text
    data: dict[str, Any] = response.json()
    return data


def conflict(response: Any, current: str) -> None:
    assert response.status_code == 409, response.text
    assert response.json()["error"] == "invalid_state"
    assert response.json()["currentState"] == current


def test_create_returns_a_queued_user_task(client: TestClient) -> None:
    response = client.post(
        "/api/tasks", json={"workspaceId": "default", "prompt": "Fix CI", "model": "opus"}
    )
    assert response.status_code == 201
    assert int(response.headers["x-tachograph-position"]) > 0
    task = response.json()
    assert set(task) == ROW_FIELDS | {"activity", "hasWorkflow"}
    assert task["activity"] == [] and task["hasWorkflow"] is False  # a plain task has none
    assert (task["status"], task["source"], task["kind"]) == ("queued", "user", "task")
    assert (task["attemptCount"], task["maxAttempts"], task["model"]) == (0, 3, "opus")


def test_create_validates_its_body(client: TestClient) -> None:
    base = {"workspaceId": "default", "prompt": "x"}
    for bad in ({"maxAttempts": 0}, {"maxAttempts": 11}, {"prompt": ""}, {"source": "self-update"}):
        assert client.post("/api/tasks", json={**base, **bad}).status_code == 422
    missing = client.post("/api/tasks", json={**base, "workspaceId": "nope"})
    assert (missing.status_code, missing.json()["error"]) == (404, "not_found")


def test_list_rows_carry_no_activity_and_filter(client: TestClient) -> None:
    long_prompt = "p" * 900
    a = create(client, prompt=long_prompt)
    b = create(client)
    client.post(f"/api/tasks/{b['id']}/cancel")
    items = client.get("/api/tasks").json()["items"]
    assert [t["id"] for t in items] == [b["id"], a["id"]]
    assert all(set(t) == ROW_FIELDS for t in items)
    assert items[1]["prompt"] == long_prompt[:500]
    assert get(client, a["id"])["prompt"] == long_prompt
    assert [t["id"] for t in client.get("/api/tasks?status=queued").json()["items"]] == [a["id"]]
    assert client.get("/api/tasks?source=user&limit=1").json()["items"][0]["id"] == b["id"]
    assert client.get("/api/tasks?workspaceId=other").json()["items"] == []
    assert client.get("/api/tasks?status=sleeping").status_code == 422
    assert client.get("/api/tasks?limit=201").status_code == 422


def test_detail_keeps_the_latest_256_of_1000_activity_records(client: TestClient) -> None:
    task = create(client)
    attempt = claim(client, task["id"])
    tasks = service_of(client)
    for start in range(0, 1000, 100):
        records = [{"kind": "text", "text": f"line {n}"} for n in range(start, start + 100)]
        tasks.append_activity(attempt.transcript, records)
    tasks.append_activity(attempt.transcript, [{"kind": "tool_result", "result": "z" * 50_000}])
    detail = get(client, task["id"])
    activity = detail["activity"]
    assert len(activity) == 256
    assert [r["text"] for r in activity[:-1]] == [f"line {n}" for n in range(745, 1000)]
    assert [r["seq"] for r in activity] == list(range(746, 1002))
    assert set(activity[0]) == {
        "seq", "attempt", "at", "kind", "agent", "text", "tool", "args", "result", "error"
    }  # fmt: skip
    assert all(r["attempt"] == 1 for r in activity)
    for record in activity:
        size = len(json.dumps({k: v for k, v in record.items() if v is not None}).encode())
        assert size <= RECORD_LIMIT_BYTES + 64  # bounded; JSON escaping may differ slightly
    listed = client.get("/api/tasks").json()
    assert "activity" not in json.dumps(listed)


def test_activity_spans_attempts_in_order(client: TestClient) -> None:
    task = create(client)
    tasks = service_of(client)
    first = claim(client, task["id"])
    tasks.append_activity(first.transcript, [{"kind": "text", "text": "first try"}])
    tasks.recover(UUID(task["id"]), 1, None, "worker gone")
    second = claim(client, task["id"])
    tasks.append_activity(second.transcript, [{"kind": "text", "text": "second try"}])
    activity = get(client, task["id"])["activity"]
    assert [(r["attempt"], r["text"]) for r in activity] == [(1, "first try"), (2, "second try")]


def test_cancel_queued_then_resolve_then_delete(client: TestClient) -> None:
    task = create(client)
    cancelled = client.post(f"/api/tasks/{task['id']}/cancel")
    assert cancelled.status_code == 200
    assert cancelled.json()["status"] == "cancelled"
    assert cancelled.json()["lastErrorClass"] == "cancelled"
    conflict(client.post(f"/api/tasks/{task['id']}/cancel"), "cancelled")
    resolved = client.post(f"/api/tasks/{task['id']}/resolve", json={"summary": "Not needed."})
    assert resolved.status_code == 200
    body = resolved.json()
    assert (body["status"], body["resolution"], body["lastErrorClass"]) == (
        "completed",
        "Not needed.",
        None,
    )
    conflict(client.post(f"/api/tasks/{task['id']}/resolve", json={"summary": "x"}), "completed")
    conflict(client.post(f"/api/tasks/{task['id']}/cancel"), "completed")
    deleted = client.delete(f"/api/tasks/{task['id']}")
    assert deleted.status_code == 204 and "x-tachograph-position" in deleted.headers
    assert client.get(f"/api/tasks/{task['id']}").status_code == 404
    assert client.get("/api/tasks").json()["items"] == []
    assert client.delete(f"/api/tasks/{task['id']}").status_code == 404
    assert client.post(f"/api/tasks/{task['id']}/cancel").status_code == 404


def test_running_task_cancels_through_cancelling(client: TestClient) -> None:
    task = create(client)
    attempt = claim(client, task["id"])
    assert get(client, task["id"])["status"] == "running"
    conflict(client.post(f"/api/tasks/{task['id']}/resolve", json={"summary": "x"}), "running")
    conflict(client.delete(f"/api/tasks/{task['id']}"), "running")
    cancelling = client.post(f"/api/tasks/{task['id']}/cancel")
    assert cancelling.json()["status"] == "cancelling"
    assert client.post(f"/api/tasks/{task['id']}/cancel").json()["status"] == "cancelling"
    conflict(client.post(f"/api/tasks/{task['id']}/resolve", json={"summary": "x"}), "cancelling")
    conflict(client.delete(f"/api/tasks/{task['id']}"), "cancelling")
    service_of(client).cancelled(UUID(task["id"]), attempt.attempt)  # the process was reaped
    assert get(client, task["id"])["status"] == "cancelled"


def test_queued_tasks_refuse_resolve_and_delete(client: TestClient) -> None:
    task = create(client)
    conflict(client.post(f"/api/tasks/{task['id']}/resolve", json={"summary": "x"}), "queued")
    conflict(client.delete(f"/api/tasks/{task['id']}"), "queued")


def test_failed_task_shows_its_error_and_remediation_and_resolves(client: TestClient) -> None:
    task = create(client)
    attempt = claim(client, task["id"])
    service_of(client).fail(UUID(task["id"]), attempt.attempt, "permission", "exit code 1: 403")
    failed = get(client, task["id"])
    assert (failed["status"], failed["lastErrorClass"]) == ("failed", "permission")
    assert failed["finishedAt"] is not None and failed["startedAt"] is not None
    remediation = get(client, failed["remediationTaskId"])
    assert (remediation["kind"], remediation["parentTaskId"]) == ("remediation", task["id"])
    too_long = client.post(f"/api/tasks/{task['id']}/resolve", json={"summary": "x" * 2049})
    assert too_long.status_code == 422
    assert client.post(f"/api/tasks/{task['id']}/resolve", json={}).status_code == 422
    resolved = client.post(f"/api/tasks/{task['id']}/resolve", json={"summary": "Fixed creds."})
    assert resolved.json()["status"] == "completed"
    assert resolved.json()["lastError"] is None


def test_dead_letter_resolves_and_clears_failure_fields(client: TestClient) -> None:
    tasks = service_of(client)
    task_id = tasks.create("default", "self update", None, 1, "system", source="self-update")
    attempt = claim(client, str(task_id.aggregate_id))
    tasks.fail(task_id.aggregate_id, attempt.attempt, "provider", "overloaded")
    dead = get(client, str(task_id.aggregate_id))
    assert dead["status"] == "dead-letter" and dead["deadLetteredAt"] is not None
    resolved = client.post(f"/api/tasks/{task_id.aggregate_id}/resolve", json={"summary": "ok"})
    assert resolved.json()["deadLetteredAt"] is None
    assert resolved.json()["nextAttemptAt"] is None


def test_unknown_task_is_404(client: TestClient) -> None:
    missing = "00000000-0000-4000-8000-000000000000"
    for response in (
        client.get(f"/api/tasks/{missing}"),
        client.post(f"/api/tasks/{missing}/cancel"),
        client.post(f"/api/tasks/{missing}/resolve", json={"summary": "x"}),
        client.delete(f"/api/tasks/{missing}"),
    ):
        assert response.status_code == 404
        assert response.json()["error"] == "not_found"


def test_without_a_task_command_tasks_stay_queued(client: TestClient) -> None:
    task = create(client)
    runtime = services_of(client).tasks
    assert runtime is not None and runtime.executor is None
    runtime.tick()  # what the poll job does: recovery, then (with an executor) claims
    assert get(client, task["id"])["status"] == "queued"
    assert client.get("/api/health").json()["executor"] == "none"
