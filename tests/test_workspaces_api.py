"""Workspace routes on both stores."""

from __future__ import annotations

import os

from fastapi.testclient import TestClient

from infra.settings import Settings


def test_default_workspace_always_exists(client: TestClient) -> None:
    response = client.get("/api/workspaces/default")
    assert response.status_code == 200
    assert response.json()["path"] == "."
    assert [w["id"] for w in client.get("/api/workspaces").json()["items"]] == ["default"]


def test_register_lists_and_gets_a_workspace(client: TestClient, settings: Settings) -> None:
    (settings.workspace_root / "repo").mkdir()
    created = client.post("/api/workspaces", json={"id": "repo-1", "path": "repo"})
    assert created.status_code == 201
    assert created.json()["id"] == "repo-1"
    assert created.json()["selfUpdate"] is False
    assert int(created.headers["x-tachograph-position"]) > 0
    ids = [w["id"] for w in client.get("/api/workspaces").json()["items"]]
    assert ids == ["repo-1", "default"]
    assert client.get("/api/workspaces/repo-1").json()["path"] == "repo"


def test_registering_the_same_workspace_again_returns_the_original(
    client: TestClient, settings: Settings
) -> None:
    (settings.workspace_root / "a").mkdir()
    (settings.workspace_root / "b").mkdir()
    first = client.post("/api/workspaces", json={"id": "a", "path": "a"})
    again = client.post("/api/workspaces", json={"id": "a", "path": "a"})
    assert (first.status_code, again.status_code) == (201, 200)
    assert again.json() == first.json()
    other = client.post("/api/workspaces", json={"id": "a", "path": "b"})
    assert other.status_code == 409
    assert other.json()["error"] == "already_exists"


def test_patch_toggles_self_update(client: TestClient) -> None:
    response = client.patch("/api/workspaces/default", json={"selfUpdate": True})
    assert response.status_code == 200
    assert response.json()["selfUpdate"] is True
    assert client.get("/api/workspaces/default").json()["selfUpdate"] is True


def test_paths_escaping_the_root_are_refused(client: TestClient, settings: Settings) -> None:
    outside = settings.workspace_root.parent / "outside"
    outside.mkdir()
    os.symlink(outside, settings.workspace_root / "escape")
    for path in [str(outside), "../outside", "x/../../outside", "escape"]:
        response = client.post("/api/workspaces", json={"id": "bad", "path": path})
        assert response.status_code == 422, path
        assert response.json()["error"] == "path_outside_root", path
    assert client.get("/api/workspaces/bad").status_code == 404


def test_missing_directory_and_bad_slug_are_422(client: TestClient) -> None:
    missing = client.post("/api/workspaces", json={"id": "gone", "path": "nope"})
    assert missing.status_code == 422
    assert "not an existing directory" in missing.json()["message"]
    bad_slug = client.post("/api/workspaces", json={"id": "Bad_Slug", "path": "."})
    assert bad_slug.status_code == 422
    assert bad_slug.json()["error"] == "validation_error"


def test_unknown_workspace_is_404(client: TestClient) -> None:
    assert client.get("/api/workspaces/nope").json()["error"] == "not_found"
    assert client.patch("/api/workspaces/nope", json={"selfUpdate": True}).status_code == 404
    assert client.delete("/api/workspaces/nope/sessions").status_code == 404


def test_delete_workspace_sessions_removes_active_and_archived(
    client: TestClient, settings: Settings
) -> None:
    (settings.workspace_root / "w").mkdir()
    client.post("/api/workspaces", json={"id": "w", "path": "w"})
    ids = [client.post("/api/sessions", json={"workspaceId": "w"}).json()["id"] for _ in range(3)]
    client.patch(f"/api/sessions/{ids[0]}", json={"archived": True})
    keep = client.post("/api/sessions", json={"workspaceId": "default"}).json()["id"]
    response = client.delete("/api/workspaces/w/sessions")
    assert response.status_code == 200
    assert sorted(response.json()["deleted"]) == sorted(ids)
    for session_id in ids:
        assert client.get(f"/api/sessions/{session_id}").status_code == 404
    assert client.get(f"/api/sessions/{keep}").status_code == 200
