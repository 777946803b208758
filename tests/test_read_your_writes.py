"""Read-your-writes through positions (SPEC §4), on both stores."""

from __future__ import annotations

import time

from fastapi.testclient import TestClient

from api.app import create_app
from bootstrap import Services
from infra.settings import Settings
from tests.support import applied_within


def test_post_then_get_sees_the_change_every_time(client: TestClient) -> None:
    for i in range(100):
        created = client.post("/api/sessions", json={"workspaceId": "default", "title": f"s{i}"})
        position = created.headers["x-tachograph-position"]
        session_id = created.json()["id"]
        renamed = client.patch(f"/api/sessions/{session_id}", json={"title": f"r{i}"})
        assert int(renamed.headers["x-tachograph-position"]) > int(position)
        read = client.get(
            f"/api/sessions/{session_id}",
            params={"minPosition": renamed.headers["x-tachograph-position"]},
        )
        assert read.json()["title"] == f"r{i}"
        listed = client.get("/api/sessions", params={"limit": 1}).json()["items"]
        assert listed[0]["id"] == session_id


def test_min_position_waits_for_a_write_made_outside_the_api(
    client: TestClient,
) -> None:
    services: Services = client.app.state.services  # type: ignore[attr-defined]
    recorded = services.app.create_session("default", "direct", "test")
    response = client.get(
        f"/api/sessions/{recorded.aggregate_id}",
        headers={"x-tachograph-min-position": str(recorded.position)},
    )
    assert response.status_code == 200
    assert response.json()["title"] == "direct"


def test_unreachable_position_is_503_projection_lagging(settings: Settings) -> None:
    app = create_app(settings.with_(read_wait_s=0.2))
    with TestClient(app, raise_server_exceptions=False) as client:
        services: Services = app.state.services
        services.runner.stop()  # nothing will apply the next event
        recorded = services.app.create_session("default", None, "test")
        response = client.get("/api/sessions", params={"minPosition": recorded.position})
        assert response.status_code == 503
        assert response.json()["error"] == "projection_lagging"


def test_a_lingering_commit_never_holds_a_reader(client: TestClient) -> None:
    services: Services = client.app.state.services  # type: ignore[attr-defined]
    assert services.runner.commit_linger > 0  # the runner lets a commit's answers go first
    services.runner.commit_linger = 60.0  # so only a reader can cut it short here
    services.runner.poll_interval = 60.0
    services.scheduler.stop()  # its jobs wait for positions, which cuts the linger short
    # A route that waits for its own position is never held.
    created = client.post("/api/sessions", json={"workspaceId": "default"})
    assert created.status_code == 201
    time.sleep(0.2)
    ingested = client.post(  # a hook is answered without waiting for read models
        f"/api/sessions/{created.json()['id']}/events", json={"event": "PostToolUse"}
    )
    held = int(ingested.headers["x-tachograph-position"])
    assert not applied_within(services.runner, held, 0.3)
    # A read at the hook's position waits for it, and cuts the linger short.
    hooks = client.get(
        f"/api/sessions/{created.json()['id']}/hooks",
        headers={"x-tachograph-min-position": str(held)},
    )
    assert hooks.status_code == 200
    assert [r["event"] for r in hooks.json()["items"]][-1] == "PostToolUse"
