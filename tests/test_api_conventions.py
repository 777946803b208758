"""Error shapes, authentication and OpenAPI (SPEC §5)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

from fastapi.testclient import TestClient

from api.app import create_app
from infra.settings import Settings


def test_invalid_json_is_400(client: TestClient) -> None:
    response = client.post(
        "/api/sessions", content=b"{not json", headers={"content-type": "application/json"}
    )
    assert response.status_code == 400
    assert response.json()["error"] == "invalid_json"
    assert client.get("/api/sessions").json()["items"] == []


def test_unknown_field_is_422_naming_it(client: TestClient) -> None:
    response = client.post("/api/sessions", json={"workspaceId": "default", "colour": "red"})
    assert response.status_code == 422
    assert response.json()["error"] == "unknown_field"
    assert "colour" in response.json()["message"]


def test_wrong_type_is_422_with_message(client: TestClient) -> None:
    response = client.post("/api/sessions", json={"workspaceId": "default", "title": 5})
    assert response.status_code == 422
    body = response.json()
    assert set(body) >= {"error", "message"}
    assert "title" in body["message"]


def test_missing_aggregate_and_route_are_404(client: TestClient) -> None:
    assert client.get(f"/api/sessions/{uuid.uuid4()}").json()["error"] == "not_found"
    assert client.get("/api/nothing-here").json()["error"] == "not_found"
    assert client.get("/api/sessions/not-a-uuid").status_code == 422


def test_chunked_body_over_limit_is_413(client: TestClient) -> None:
    def chunks() -> Iterator[bytes]:
        for _ in range(20):
            yield b"x" * 65536

    response = client.post(
        "/api/sessions", content=chunks(), headers={"content-type": "application/json"}
    )
    assert response.status_code == 413


def test_api_key_is_required_when_configured(settings: Settings) -> None:
    app = create_app(settings.with_(api_key="s3cret-key"))
    with TestClient(app, raise_server_exceptions=False) as client:
        assert client.get("/api/sessions").status_code == 401
        assert client.get("/api/sessions", headers={"x-tachograph-key": "wrong"}).status_code == 401
        ok = client.get("/api/sessions", headers={"x-tachograph-key": "s3cret-key"})
        assert ok.status_code == 200
        assert client.get("/openapi.json").status_code == 200


def test_openapi_lists_the_routes(client: TestClient) -> None:
    paths = client.get("/openapi.json").json()["paths"]
    for path in [
        "/api/sessions",
        "/api/sessions/{session_id}",
        "/api/workspaces",
        "/api/events",
        "/api/streams/{aggregate_id}",
        "/api/health",
    ]:
        assert path in paths
    assert client.get("/docs").status_code == 200


def test_health_reports_projection_positions(client: TestClient) -> None:
    client.post("/api/sessions", json={"workspaceId": "default"})
    body = client.get("/api/health").json()
    assert body["status"] == "ok" and body["database"] == "ok"
    assert set(body["projections"]) >= {"sessions", "workspaces"}
    assert body["executor"] == "none"
    assert body["scheduler"] == "running"
