"""GET /api/autonomy/pipeline on both stores: the learning loop at a glance, from signals in
to deliveries made, each count with its latest time."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient

from domain.agent_ids import TASKS_AGENT_ID
from infra.settings import Settings
from tests.autonomy.conftest import Driven, enable, post_signal, quiet_client, services_of
from tests.credentials.conftest import BOOTSTRAP, issue
from tests.tasks.conftest import wait_until

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "claude-code"


def pipeline(client: TestClient, **params: Any) -> dict[str, Any]:
    response = client.get("/api/autonomy/pipeline", params=params)
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def reflect(driven: Driven) -> dict[str, int]:
    outcomes = driven.autonomy.reflect()
    driven.settled()
    return outcomes


def test_an_empty_pipeline_counts_zero_everywhere(api: TestClient) -> None:
    assert pipeline(api) == {
        "signals": {
            "total": 0,
            "byKind": {"outcome": 0, "failure": 0},
            "byStatus": {
                "pending": 0,
                "claimed": 0,
                "completed": 0,
                "ignored": 0,
                "dead-letter": 0,
            },
            "latestAt": None,
        },
        "decisions": {
            "total": 0,
            "byStrategy": {"none": 0, "overlay": 0, "skill": 0, "fact": 0},
            "latestAt": None,
        },
        "revisions": {"learned": 0, "latestAt": None},
        "reverts": {"count": 0, "latestAt": None},
        "deliveries": {"count": 0, "items": 0, "sessions": 0, "taskAttempts": 0, "latestAt": None},
    }


def test_the_pipeline_counts_signals_decisions_lessons_reverts_and_deliveries(
    driven: Driven,
) -> None:
    api = driven.client
    enable(api, evolution=True, skillCreation=True)
    agent = "claude-code"
    bash = "Bash failed 3 times: exit code 2"
    post_signal(api, agentId=agent, traceId="a", failure=bash, failureClass="tool_failure")
    post_signal(api, agentId=agent, traceId="b", failure=bash, failureClass="tool_failure")
    post_signal(api, agentId=agent, traceId="c", kind="outcome", outcome="Ran migrations first")
    post_signal(api, agentId="codex", traceId="d", failure="429", failureClass="rate_limit")
    ignored = post_signal(api, agentId=agent, traceId="e", kind="outcome", outcome="x")
    assert api.post(f"/api/autonomy/signals/{ignored['id']}/ignore").status_code == 200
    assert reflect(driven) == {"completed": 4}
    pending = post_signal(api, agentId=agent, traceId="f", failure="late", failureClass="x")

    summary = pipeline(api)
    signals = summary["signals"]
    assert (signals["total"], signals["byKind"]) == (6, {"outcome": 2, "failure": 4})
    assert signals["byStatus"] == {
        "pending": 1, "claimed": 0, "completed": 4, "ignored": 1, "dead-letter": 0,
    }  # fmt: skip
    assert signals["latestAt"] == pending["createdAt"]
    decisions = summary["decisions"]
    assert decisions["total"] == 4
    assert decisions["byStrategy"] == {"none": 1, "overlay": 2, "skill": 1, "fact": 0}
    revisions = api.get("/api/autonomy/revisions").json()["items"]
    assert summary["revisions"] == {"learned": 3, "latestAt": revisions[0]["at"]}
    assert summary["reverts"] == {"count": 0, "latestAt": None}
    assert decisions["latestAt"] is not None and decisions["latestAt"] >= revisions[0]["at"]

    # One agent's view of the loop.
    codex = pipeline(api, agentId="codex")
    assert codex["signals"]["total"] == 1 and codex["decisions"]["byStrategy"]["overlay"] == 1
    assert codex["revisions"]["learned"] == 1
    assert pipeline(api, agentId="nobody")["signals"]["total"] == 0

    # A Claude Code prompt receives the agent's lessons: one delivery of two items.
    payload = json.loads((FIXTURES / "UserPromptSubmit-1.json").read_text())["payload"]
    answered = api.post("/hooks/claude", json=payload)
    assert answered.status_code == 200, answered.text
    driven.settled()
    deliveries = pipeline(api)["deliveries"]
    assert (deliveries["count"], deliveries["items"], deliveries["sessions"]) == (1, 2, 1)
    assert deliveries["taskAttempts"] == 0 and deliveries["latestAt"] is not None
    assert pipeline(api, agentId="codex")["deliveries"]["count"] == 0

    # A revert is counted with its time; what it compensates stays counted as learned.
    overlay = next(r for r in revisions if r["agentId"] == agent and r["targetKind"] == "overlay")
    reverted = api.post(f"/api/autonomy/revisions/{overlay['id']}/revert")
    assert reverted.status_code == 200, reverted.text
    position = reverted.headers["x-tachograph-position"]
    after = pipeline(api, minPosition=position)
    assert after["reverts"] == {"count": 1, "latestAt": reverted.json()["at"]}
    assert after["revisions"]["learned"] == 3


def test_a_reader_key_sees_the_pipeline_and_a_bad_filter_is_refused(settings: Settings) -> None:
    with quiet_client(settings.with_(api_key=BOOTSTRAP)) as secured:
        secret = issue(secured, label="rita", role="reader")
        reader = {"x-tachograph-key": secret}
        assert secured.get("/api/autonomy/pipeline").status_code == 401
        seen = secured.get("/api/autonomy/pipeline", headers=reader)
        assert seen.status_code == 200 and seen.json()["signals"]["total"] == 0
        bad = secured.get("/api/autonomy/pipeline", params={"agentId": "bad agent"}, headers=reader)
        assert bad.status_code == 422 and "agentId" in bad.text


def test_a_task_attempt_that_carried_lessons_counts_as_a_delivery(settings: Settings) -> None:
    command = (sys.executable, "-c", "import sys; print(sys.argv[1][:10])", "{prompt}")
    with quiet_client(settings, task_command=command, task_poll_interval_s=3600.0) as api:
        services = services_of(api)
        assert services.tasks is not None and services.autonomy is not None
        enable(api, evolution=True)
        post_signal(api, agentId=TASKS_AGENT_ID, traceId="task:x:1", failure="no database")
        assert services.autonomy.reflect() == {"completed": 1}
        body = {"workspaceId": "default", "prompt": "Fix the flaky test.", "maxAttempts": 1}
        task = api.post("/api/tasks", json=body).json()
        services.tasks.tick()

        def finished() -> bool:
            row = api.get(f"/api/tasks/{task['id']}").json()
            return row["status"] in ("completed", "failed")

        wait_until(finished)
        head = services.app.recorder.max_notification_id()
        deliveries = pipeline(api, minPosition=head)["deliveries"]
        assert (deliveries["count"], deliveries["items"], deliveries["taskAttempts"]) == (1, 1, 1)
        assert pipeline(api, agentId=TASKS_AGENT_ID)["deliveries"]["count"] == 1
        assert pipeline(api, agentId="claude-code")["deliveries"]["count"] == 0
