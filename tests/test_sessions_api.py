"""Session routes on both stores."""

from __future__ import annotations

import threading
from typing import Any

from fastapi.testclient import TestClient

SESSION_FIELDS = {
    "id",
    "workspaceId",
    "title",
    "titleLocked",
    "summary",
    "agentSessionId",
    "agent",
    "status",
    "firstSignalAt",
    "lastSignalAt",
    "archivedAt",
    "revision",
    "createdAt",
    "updatedAt",
    "usage",  # what its runtime reported (tests/test_usage_api.py)
}


def new_session(client: TestClient, **body: Any) -> dict[str, Any]:
    response = client.post("/api/sessions", json={"workspaceId": "default", **body})
    assert response.status_code == 201, response.text
    data: dict[str, Any] = response.json()
    return data


def test_create_returns_the_full_row_with_empty_hook_fields(client: TestClient) -> None:
    session = new_session(client)
    assert set(session) == SESSION_FIELDS | {"messages"}
    assert session["messages"] == []
    assert session["revision"] == 0
    assert session["title"] is None and session["titleLocked"] is False
    assert session["summary"] is None and session["agentSessionId"] is None
    assert session["usage"] == {
        "requests": 0,
        "inputTokens": 0,
        "outputTokens": 0,
        "cacheReadTokens": 0,
        "cacheCreationTokens": 0,
        "costUsd": 0.0,
    }


def test_list_rows_have_no_messages_and_filter_by_archive_and_workspace(client: TestClient) -> None:
    a = new_session(client, title="a")
    b = new_session(client, title="b")
    client.patch(f"/api/sessions/{a['id']}", json={"archived": True})
    active = client.get("/api/sessions").json()["items"]
    assert [s["id"] for s in active] == [b["id"]]
    assert set(active[0]) == SESSION_FIELDS
    archived = client.get("/api/sessions", params={"archived": "true"}).json()["items"]
    assert [s["id"] for s in archived] == [a["id"]]
    assert client.get("/api/sessions", params={"workspaceId": "other"}).json()["items"] == []


def test_list_is_newest_first_and_limited(client: TestClient) -> None:
    ids = [new_session(client)["id"] for _ in range(4)]
    listed = client.get("/api/sessions", params={"limit": 3}).json()["items"]
    assert [s["id"] for s in listed] == ids[::-1][:3]
    assert client.get("/api/sessions", params={"limit": 201}).status_code == 422


def test_unknown_workspace_is_404(client: TestClient) -> None:
    response = client.post("/api/sessions", json={"workspaceId": "nope"})
    assert response.status_code == 404
    assert response.json()["error"] == "not_found"


def test_rename_locks_title_and_archive_restore(client: TestClient) -> None:
    session = new_session(client)
    renamed = client.patch(f"/api/sessions/{session['id']}", json={"title": "Mine"}).json()
    assert (renamed["title"], renamed["titleLocked"]) == ("Mine", True)
    archived = client.patch(f"/api/sessions/{session['id']}", json={"archived": True}).json()
    assert archived["archivedAt"] is not None
    restored = client.patch(f"/api/sessions/{session['id']}", json={"archived": False}).json()
    assert restored["archivedAt"] is None
    assert restored["title"] == "Mine"


def test_save_messages_increments_revision_and_rejects_stale(client: TestClient) -> None:
    session = new_session(client)
    url = f"/api/sessions/{session['id']}"
    saved = client.put(url, json={"revision": 0, "messages": [{"role": "user", "text": "hi"}]})
    assert saved.status_code == 200
    assert saved.json()["revision"] == 1
    assert client.get(url).json()["messages"] == [{"role": "user", "text": "hi"}]
    stale = client.put(url, json={"revision": 0, "messages": []})
    assert stale.status_code == 409
    body = stale.json()
    assert body["error"] == "revision_conflict"
    assert body["session"]["revision"] == 1
    assert body["session"]["messages"] == [{"role": "user", "text": "hi"}]


def test_two_concurrent_saves_exactly_one_wins(client: TestClient) -> None:
    for _ in range(10):
        session = new_session(client)
        url = f"/api/sessions/{session['id']}"
        barrier = threading.Barrier(2)
        statuses: list[int] = []

        def save(
            text: str,
            barrier: threading.Barrier = barrier,
            url: str = url,
            statuses: list[int] = statuses,
        ) -> None:
            barrier.wait()
            response = client.put(url, json={"revision": 0, "messages": [text]})
            statuses.append(response.status_code)

        threads = [threading.Thread(target=save, args=(t,)) for t in ("a", "b")]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sorted(statuses) == [200, 409]
        final = client.get(url).json()
        assert final["revision"] == 1
        assert final["messages"] in (["a"], ["b"])


def test_delete_removes_session_from_read_models(client: TestClient) -> None:
    session = new_session(client)
    url = f"/api/sessions/{session['id']}"
    deleted = client.delete(url)
    assert deleted.status_code == 204
    assert int(deleted.headers["x-tachograph-position"]) > 0
    assert client.get(url).status_code == 404
    assert client.get("/api/sessions").json()["items"] == []
    assert client.delete(url).status_code == 404
    assert client.patch(url, json={"title": "x"}).status_code == 404
    assert client.put(url, json={"revision": 0, "messages": []}).status_code == 404


def test_messages_over_one_mib_are_413_and_change_nothing(client: TestClient) -> None:
    session = new_session(client)
    url = f"/api/sessions/{session['id']}"
    response = client.put(url, json={"revision": 0, "messages": ["x" * (1024 * 1024)]})
    assert response.status_code == 413
    assert response.json()["error"] == "payload_too_large"
    assert client.get(url).json()["revision"] == 0
