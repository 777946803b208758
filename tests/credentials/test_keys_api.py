"""Issuing, using, expiring and revoking credentials through the HTTP API (both stores)."""

from __future__ import annotations

import time
import uuid

from fastapi.testclient import TestClient

from tests.credentials.conftest import ADMIN_HEADERS, Keys, issue, log_head


def key_headers(secret: str) -> dict[str, str]:
    return {"x-tachograph-key": secret}


def test_issue_returns_the_secret_once_and_lists_keys_without_it(secured: TestClient) -> None:
    answer = secured.post(
        "/api/keys",
        json={"label": "alice", "role": "operator", "expiresIn": "30d"},
        headers=ADMIN_HEADERS,
    )
    assert answer.status_code == 201
    body = answer.json()
    secret = body["secret"]
    assert secret.startswith("tgk_") and len(secret) == 47
    assert (body["label"], body["role"], body["issuedBy"]) == ("alice", "operator", "key:admin")
    assert body["expiresAt"] > body["createdAt"]
    me = secured.get("/api/whoami", headers=key_headers(secret)).json()
    assert (me["label"], me["role"], me["actor"]) == ("alice", "operator", "key:alice")
    listed = secured.get("/api/keys", headers=ADMIN_HEADERS).json()["items"]
    assert [k["label"] for k in listed] == ["alice"]
    assert "secret" not in listed[0] and secret not in str(listed)
    # Only the digest is in the log.
    events = secured.get("/api/events?type=ApiKey.Issued", headers=ADMIN_HEADERS).json()["events"]
    assert len(events) == 1 and secret not in str(events)
    assert len(events[0]["data"]["secret_sha256"]) == 64


def test_revoked_key_is_refused_at_once_and_labels_are_never_reused(secured: TestClient) -> None:
    secret = issue(secured, label="bob", role="reader")
    assert secured.get("/api/sessions", headers=key_headers(secret)).status_code == 200
    revoked = secured.post(
        "/api/keys/bob/revoke", json={"reason": "left the team"}, headers=ADMIN_HEADERS
    )
    assert revoked.status_code == 200
    assert revoked.json()["revokedBy"] == "key:admin"
    assert revoked.json()["reason"] == "left the team"
    refused = secured.get("/api/sessions", headers=key_headers(secret))
    assert refused.status_code == 401
    assert (
        refused.json()["reason"] == "revoked" and "'bob' was revoked" in refused.json()["message"]
    )
    again = secured.post("/api/keys/bob/revoke", headers=ADMIN_HEADERS)
    assert again.status_code == 409
    reused = secured.post(
        "/api/keys", json={"label": "bob", "role": "reader"}, headers=ADMIN_HEADERS
    )
    assert reused.status_code == 409 and reused.json()["error"] == "already_exists"
    assert secured.post("/api/keys/nobody/revoke", headers=ADMIN_HEADERS).status_code == 404


def test_expired_key_is_refused_saying_so(secured: TestClient) -> None:
    secret = issue(secured, label="brief", role="reader", expiresIn="1s")
    assert secured.get("/api/sessions", headers=key_headers(secret)).status_code == 200
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        refused = secured.get("/api/sessions", headers=key_headers(secret))
        if refused.status_code == 401:
            break
        time.sleep(0.1)
    assert refused.status_code == 401
    assert refused.json()["reason"] == "expired" and "expired at" in refused.json()["message"]


def test_bad_credentials_get_one_sentence_each(secured: TestClient) -> None:
    cases = {
        "missing": {},
        "malformed": key_headers("not-a-key"),
        "unknown": key_headers("tgk_" + "A" * 43),
    }
    for reason, headers in cases.items():
        before = log_head(secured)
        refused = secured.post("/api/sessions", json={"workspaceId": "default"}, headers=headers)
        assert refused.status_code == 401, reason
        body = refused.json()
        assert body["error"] == "unauthorized" and body["reason"] == reason
        assert body["message"].endswith(".") and body["message"].count(". ") == 0
        assert log_head(secured) == before


def test_bad_key_requests_are_422_and_change_nothing(secured: TestClient) -> None:
    session = secured.post("/api/sessions", json={"workspaceId": "default"}, headers=ADMIN_HEADERS)
    bad = [
        ({"label": "x", "role": "root"}, 422),
        ({"label": "Has Spaces", "role": "reader"}, 422),
        ({"label": "admin", "role": "reader"}, 422),  # the bootstrap key's label
        ({"role": "reader"}, 422),  # only agent tokens get a made-up label
        ({"label": "x", "role": "reader", "expiresIn": "soon"}, 422),
        ({"label": "x", "role": "reader", "sessionId": session.json()["id"]}, 422),
        ({"label": "x", "role": "agent"}, 422),  # an agent token must be bound
        ({"role": "agent", "sessionId": str(uuid.uuid4())}, 404),
        ({"role": "agent", "workspaceId": "no-such-workspace"}, 404),
        ({"label": "x", "role": "reader", "colour": "red"}, 422),
    ]
    for body, status in bad:
        before = log_head(secured)
        answer = secured.post("/api/keys", json=body, headers=ADMIN_HEADERS)
        assert answer.status_code == status, (body, answer.text)
        assert log_head(secured) == before, body
    assert secured.get("/api/keys", headers=ADMIN_HEADERS).json()["items"] == []


def test_agent_token_writes_only_into_its_own_session(secured: TestClient, keys: Keys) -> None:
    agent = keys.headers("agent")
    own = secured.post(
        f"/api/sessions/{keys.session}/events",
        json={"event": "PreToolUse", "toolName": "Bash"},
        headers=agent,
    )
    assert own.status_code == 200 and own.json()["outcome"] == "pass"
    other = secured.post("/api/sessions", json={"workspaceId": "default"}, headers=ADMIN_HEADERS)
    other_id = other.json()["id"]
    for attempt in range(2):  # the second time the session is known to the fast path too
        before = log_head(secured)
        refused = secured.post(
            f"/api/sessions/{other_id}/events",
            json={"event": "PreToolUse", "eventId": f"e{attempt}"},
            headers=agent,
        )
        assert refused.status_code == 403, refused.text
        assert keys.session in refused.json()["message"]
        assert log_head(secured) == before
        secured.post(
            f"/api/sessions/{other_id}/events", json={"event": "Stop"}, headers=ADMIN_HEADERS
        )
    # Claude Code's native hook: no session header means the token's own session.
    claude = {
        "session_id": "native-1",
        "hook_event_name": "PreToolUse",
        "tool_name": "Bash",
        "tool_input": {"command": "ls"},
    }
    answer = secured.post("/hooks/claude", json=claude, headers=agent)
    assert answer.status_code == 200
    position = answer.headers["x-tachograph-position"]
    hooks = secured.get(
        f"/api/sessions/{keys.session}/hooks?minPosition={position}", headers=ADMIN_HEADERS
    ).json()
    assert [h["event"] for h in hooks["items"]] == ["SessionStart", "PreToolUse", "PreToolUse"]
    before = log_head(secured)
    elsewhere = secured.post(
        "/hooks/claude", json=claude, headers={**agent, "x-tachograph-session-id": other_id}
    )
    assert elsewhere.status_code == 403
    assert log_head(secured) == before
    # It cannot read, not even its own session.
    assert secured.get(f"/api/sessions/{keys.session}/hooks", headers=agent).status_code == 403


def test_workspace_token_stays_in_its_workspace(
    secured: TestClient, tmp_path_factory: object
) -> None:
    services = secured.app.state.services  # type: ignore[attr-defined]
    (services.settings.workspace_root / "team").mkdir()
    made = secured.post(
        "/api/workspaces", json={"id": "team", "path": "team"}, headers=ADMIN_HEADERS
    )
    assert made.status_code == 201
    secret = issue(secured, role="agent", workspaceId="team")
    token = key_headers(secret)
    inside = secured.post("/api/sessions", json={"workspaceId": "team"}, headers=ADMIN_HEADERS)
    outside = secured.post("/api/sessions", json={"workspaceId": "default"}, headers=ADMIN_HEADERS)
    event = {"event": "UserPromptSubmit", "prompt": "hello"}
    ok = secured.post(f"/api/sessions/{inside.json()['id']}/events", json=event, headers=token)
    assert ok.status_code == 200
    before = log_head(secured)
    refused = secured.post(
        f"/api/sessions/{outside.json()['id']}/events", json=event, headers=token
    )
    assert refused.status_code == 403 and "workspace 'team'" in refused.json()["message"]
    claude = {"session_id": "native-2", "hook_event_name": "UserPromptSubmit", "prompt": "hi"}
    wrong = secured.post(
        "/hooks/claude", json=claude, headers={**token, "x-tachograph-workspace": "default"}
    )
    assert wrong.status_code == 403
    assert log_head(secured) == before
    created = secured.post("/hooks/claude", json=claude, headers=token)
    assert created.status_code == 200
    position = created.headers["x-tachograph-position"]
    sessions = secured.get(
        f"/api/sessions?workspaceId=team&minPosition={position}", headers=ADMIN_HEADERS
    ).json()["items"]
    assert len(sessions) == 2  # the hook's new session lives in the token's workspace


def test_open_server_treats_callers_as_anonymous_admin(client: TestClient) -> None:
    me = client.get("/api/whoami").json()
    assert (me["role"], me["actor"], me["authRequired"]) == ("admin", "anonymous", False)
    # A key presented to an open server still counts, with its own role.
    secret = client.post("/api/keys", json={"label": "r", "role": "reader"}).json()["secret"]
    assert client.get("/api/whoami", headers=key_headers(secret)).json()["role"] == "reader"
    refused = client.post(
        "/api/tasks", json={"workspaceId": "default", "prompt": "x"}, headers=key_headers(secret)
    )
    assert refused.status_code == 403
