"""Who may change policy: agent tokens and reader keys get 403 on every POST of
/api/policy and nothing changes; operators and admins record, activate, roll back and
remove, and the record names them."""

from __future__ import annotations

from fastapi.testclient import TestClient

from tests.credentials.conftest import ADMIN_HEADERS, Keys, log_head

FIRST = "version: 1\nrules:\n  - {id: no-sudo, when: 'tool == \"Bash\"', then: deny}\n"
SECOND = "version: 1\nrules:\n  - {id: nothing, when: 'false', then: deny}\n"


def test_agents_and_readers_cannot_change_policy(secured: TestClient, keys: Keys) -> None:
    recorded = secured.post(
        "/api/policy/revisions", json={"source": FIRST}, headers=ADMIN_HEADERS
    ).json()
    assert secured.post(
        f"/api/policy/revisions/{recorded['id']}/activate", headers=ADMIN_HEADERS
    ).is_success
    later = secured.post("/api/policy/revisions", json={"source": SECOND}, headers=ADMIN_HEADERS)
    assert secured.post(
        f"/api/policy/revisions/{later.json()['id']}/activate", headers=ADMIN_HEADERS
    ).is_success
    head = log_head(secured)
    attempts = [
        ("/api/policy/revisions", {"source": SECOND}),
        ("/api/policy/revisions", {"source": SECOND, "workspaceId": "default"}),
        (f"/api/policy/revisions/{recorded['id']}/activate", None),
        (f"/api/policy/revisions/{recorded['id']}/rollback", None),
        ("/api/policy/remove", {}),
    ]
    for role in ("agent", "reader"):
        for path, body in attempts:
            response = secured.post(path, json=body, headers=keys.headers(role))
            assert response.status_code == 403, (role, path, response.text)
    assert log_head(secured) == head
    # Reading is a reader's right, not an agent's.
    assert secured.get("/api/policy", headers=keys.headers("reader")).status_code == 200
    assert secured.get("/api/policy", headers=keys.headers("agent")).status_code == 403
    [active] = secured.get("/api/policy", headers=ADMIN_HEADERS).json()["items"]
    assert active["id"] == later.json()["id"]


def test_operators_and_admins_change_policy_and_are_named(secured: TestClient, keys: Keys) -> None:
    for role, actor in (("operator", "key:otto"), ("issued-admin", "key:ada"), ("admin", None)):
        headers = keys.headers(role)
        first = secured.post("/api/policy/revisions", json={"source": FIRST}, headers=headers)
        assert first.status_code == 201, (role, first.text)
        second = secured.post("/api/policy/revisions", json={"source": SECOND}, headers=headers)
        assert second.status_code == 201, (role, second.text)
        for revision in (first.json(), second.json()):
            activated = secured.post(
                f"/api/policy/revisions/{revision['id']}/activate", headers=headers
            )
            assert activated.status_code == 200, (role, activated.text)
        rolled = secured.post(
            f"/api/policy/revisions/{first.json()['id']}/rollback", headers=headers
        )
        assert rolled.status_code == 200 and rolled.json()["active"], (role, rolled.text)
        removed = secured.post("/api/policy/remove", json={}, headers=headers)
        assert removed.status_code == 200 and removed.json()["items"] == [], (role, removed.text)
        history = secured.get("/api/policy/revisions", headers=headers).json()["history"]
        assert [h["change"] for h in history[:3]] == ["remove", "rollback", "activate"]
        if actor is not None:
            assert first.json()["actor"] == actor
            assert {h["actor"] for h in history[:5]} == {actor}
