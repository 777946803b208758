"""GET /metrics: what an operator graphs, on both stores, with bounded label values."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from api.app import create_app
from infra.metrics import SCHEDULER_JOB_RUNS, instrument_jobs
from infra.settings import Settings
from scheduler.runtime import Job
from tests.hook_server import HookServer, answer

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(client: TestClient) -> Samples:
    response = client.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    samples: Samples = {}
    for family in text_string_to_metric_families(response.text):
        for s in family.samples:
            samples[(s.name, frozenset(s.labels.items()))] = s.value
    return samples


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


def total(samples: Samples, name: str) -> float:
    return sum(v for (n, _), v in samples.items() if n == name)


@pytest.fixture
def handler() -> Iterator[HookServer]:
    server = HookServer()
    server.routes["/policy"] = answer("deny", reason="not here")
    server.routes["/broken"] = lambda _: (500, {})
    yield server
    server.close()


@pytest.fixture
def metrics_client(settings: Settings, handler: HookServer) -> Iterator[TestClient]:
    hooks = {
        "version": 1,
        "hooks": {
            "PreToolUse": [
                {"id": "tool-policy", "type": "http", "url": f"{handler.url}/policy"},
            ],
            "PostToolUse": [{"id": "audit-sink", "type": "http", "url": f"{handler.url}/broken"}],
        },
    }
    parsed = Settings.from_env(
        {"TACHOGRAPH_HOOKS": json.dumps(hooks), "TACHOGRAPH_HOOK_ALLOW_INSECURE_LOOPBACK": "1"}
    )
    configured = settings.with_(
        hooks=parsed.hooks,
        hook_allow_insecure_loopback=True,
        coder_hook_secret="c" * 40,
        coder_hook_url="https://tachograph.test/hooks/coder",
    )
    with TestClient(create_app(configured), raise_server_exceptions=False) as client:
        yield client


def test_metrics_cover_requests_appends_projections_hooks_tasks_and_rejections(
    metrics_client: TestClient,
) -> None:
    client = metrics_client
    before = scrape(client)
    sessions = [
        client.post("/api/sessions", json={"workspaceId": "default"}).json()["id"] for _ in range(3)
    ]
    for session_id in sessions:
        assert client.get(f"/api/sessions/{session_id}").status_code == 200
    assert client.get(f"/api/sessions/{uuid.uuid4()}").status_code == 404
    denied = client.post(
        f"/api/sessions/{sessions[0]}/events", json={"event": "PreToolUse", "toolName": "Bash"}
    )
    assert denied.json()["outcome"] == "deny"
    client.post(f"/api/sessions/{sessions[0]}/events", json={"event": "PostToolUse"})
    client.post(f"/api/sessions/{sessions[0]}/events", json={"event": "MadeUpEvent"})
    task = client.post("/api/tasks", json={"workspaceId": "default", "prompt": "do it"})
    assert task.status_code == 201
    rejected = client.post("/hooks/coder", content=b"{}", headers={"authorization": "Bearer x"})
    assert rejected.status_code == 401

    after = scrape(client)
    requests = "tachograph_http_requests_total"
    route = "/api/sessions/{session_id}"
    # Route templates, never raw ids: three different sessions share one series.
    assert (
        value(after, requests, method="GET", route=route, status="200")
        - value(before, requests, method="GET", route=route, status="200")
        == 3
    )
    assert value(after, requests, method="GET", route=route, status="404") >= 1
    assert not any(s in str(key) for key in after for s in sessions)
    latency = "tachograph_http_request_duration_seconds_count"
    assert value(after, latency, method="POST", route="/api/sessions") >= 3

    appended = "tachograph_events_appended_total"
    assert (
        value(after, appended, type="Session.Created")
        - value(before, appended, type="Session.Created")
        == 3
    )
    assert value(after, appended, type="Task.Created") >= 1
    assert value(after, "tachograph_group_commit_batch_size_count") > value(
        before, "tachograph_group_commit_batch_size_count"
    )

    head = value(after, "tachograph_log_head_position")
    assert head > 0
    assert value(after, "tachograph_database_up") == 1
    for projection in ("sessions", "tasks", "hook_audit"):
        assert value(after, "tachograph_projection_position", projection=projection) <= head
        assert (
            "tachograph_projection_lag_events",
            frozenset({("projection", projection)}),
        ) in after

    runs = "tachograph_hook_handler_runs_total"
    assert (
        value(after, runs, event="PreToolUse", handler="tool-policy", outcome="deny", failure="")
        >= 1
    )
    assert (
        value(
            after, runs, event="PostToolUse", handler="audit-sink", outcome="pass", failure="status"
        )
        >= 1
    )
    assert (
        value(
            after,
            "tachograph_hook_handler_duration_seconds_count",
            event="PreToolUse",
            handler="tool-policy",
        )
        >= 1
    )
    dispatches = "tachograph_hook_dispatches_total"
    assert value(after, dispatches, event="PreToolUse", outcome="deny") >= 1
    # Invented event names are accepted but share one label value.
    assert value(after, dispatches, event="other", outcome="pass") >= 1
    assert not any("MadeUpEvent" in str(key) for key in after)

    assert value(after, "tachograph_tasks", status="queued") >= 1
    assert value(after, "tachograph_tasks", status="dead-letter") == 0
    rejected_total = "tachograph_webhook_rejected_total"
    assert total(after, rejected_total) - total(before, rejected_total) == 1


def test_scheduler_job_runs_are_counted(metrics_client: TestClient) -> None:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        runs = scrape(metrics_client)
        if value(runs, "tachograph_scheduler_job_runs_total", job="tasks.poll", result="ok"):
            break
        time.sleep(0.2)
    assert value(runs, "tachograph_scheduler_job_runs_total", job="tasks.poll", result="ok") >= 1
    assert value(runs, "tachograph_scheduler_running") == 1


def test_a_failing_job_counts_as_error_and_still_raises() -> None:
    def boom() -> None:
        raise RuntimeError("job failed")

    job_id = f"test-{uuid.uuid4().hex[:8]}"
    (job,) = instrument_jobs([Job(job_id, boom, trigger=None)])
    with pytest.raises(RuntimeError):
        job.func()
    assert SCHEDULER_JOB_RUNS.labels(job_id, "error")._value.get() == 1


def test_request_metrics_label_refusals_by_route(settings: Settings) -> None:
    app = create_app(settings.with_(api_key="k" * 24))
    with TestClient(app, raise_server_exceptions=False) as client:
        assert client.get(f"/api/sessions/{uuid.uuid4()}/hooks").status_code == 401
        assert client.get("/no/such/route").status_code == 404
        after = scrape(client)
    requests = "tachograph_http_requests_total"
    assert (
        value(after, requests, method="GET", route="/api/sessions/{session_id}/hooks", status="401")
        >= 1
    )
    assert value(after, requests, method="GET", route="unmatched", status="404") >= 1


def test_405_lists_every_method_of_the_path(settings: Settings) -> None:
    with TestClient(create_app(settings), raise_server_exceptions=False) as client:
        response = client.request("TRACE", "/api/tasks")
        assert response.status_code == 405
        assert set(response.headers["allow"].split(", ")) == {"GET", "POST"}
        assert response.headers["x-request-id"]
