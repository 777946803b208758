"""Autonomy traffic for the end-to-end replay check (called by tests.audit_support)."""

from __future__ import annotations

from fastapi.testclient import TestClient

from bootstrap import Services


def autonomy_workload(client: TestClient) -> None:
    """Policy changes, signals (a duplicate, an ignored one), learned revisions and a revert,
    a user edit handed back, reconcile and an idle cycle attempt."""
    services: Services = client.app.state.services  # type: ignore[attr-defined]
    assert services.autonomy is not None
    policies = {"evolution": True, "skillCreation": True}
    assert client.patch("/api/settings/autonomy", json=policies).status_code == 200
    for i in range(4):
        body = {
            "agentId": "claude",
            "traceId": f"trace-{i}",
            "kind": "failure" if i % 2 == 0 else "outcome",
            "goal": f"goal {i}",
            "failure": f"Authorization: Bearer abcdef{i}0123456 was refused",
            "outcome": f"did it the {i} way",
        }
        assert client.post("/api/autonomy/signals", json=body).status_code == 201
    again = {"agentId": "claude", "traceId": "trace-0", "kind": "failure", "goal": "again"}
    assert client.post("/api/autonomy/signals", json=again).status_code == 200
    services.autonomy.reflect()
    head = services.app.recorder.max_notification_id() or 0
    latest = client.get("/api/autonomy/revisions", params={"minPosition": head}).json()["items"]
    assert client.post(f"/api/autonomy/revisions/{latest[0]['id']}/revert").status_code == 200
    target = "/api/autonomy/targets/overlay/claude/instructions"
    assert client.put(target, json={"content": "Edited by hand."}).status_code == 200
    assert client.post(target + "/hand-back").status_code == 200
    # The scheduled reflection may claim a new signal before the operator ignores it (409:
    # a claimed signal is not the operator's to drop); a fresh one is then ignored instead.
    for attempt in range(5):
        late = {"agentId": "codex", "traceId": f"late-{attempt}", "kind": "outcome", "goal": "g"}
        late_id = client.post("/api/autonomy/signals", json=late).json()["id"]
        ignored = client.post(f"/api/autonomy/signals/{late_id}/ignore").status_code
        assert ignored in (200, 409), ignored
        if ignored == 200:
            break
    else:
        raise AssertionError("every late signal was claimed before it could be ignored")
    assert client.patch("/api/settings/autonomy", json={"selfUpdate": True}).status_code == 200
    assert client.post("/api/autonomy/reconcile").status_code == 200
    services.autonomy.idle()
