"""Every OpenAPI route with every role: 403 outside the role, and nothing changes."""

from __future__ import annotations

import re
import uuid
from typing import Any

from fastapi.testclient import TestClient

from tests.credentials.conftest import Keys, log_head

# The decisions of the credentials issue, written out here and not read from the code,
# so a route that moves to another role (or a new route nobody classified) fails.
PUBLIC = {("get", "/"), ("get", "/web/{name}"), ("get", "/metrics"), ("post", "/hooks/coder")}
AGENT_ROUTES = {
    ("post", "/api/sessions/{session_id}/events"),
    ("post", "/hooks/claude"),
    ("post", "/hooks/{runtime}"),
    ("post", "/hooks/{runtime}/{event}"),
    ("post", "/api/autonomy/signals"),
    ("post", "/v1/logs"),
    ("post", "/v1/metrics"),
    ("post", "/v1/traces"),
}
ADMIN_ROUTES = {
    ("post", "/api/workspaces"),
    ("patch", "/api/workspaces/{slug}"),
    ("delete", "/api/workspaces/{slug}/sessions"),
    ("patch", "/api/settings/autonomy"),
    ("post", "/api/keys"),
    ("get", "/api/keys"),
    ("post", "/api/keys/{label}/revoke"),
}
ALLOWED = {
    "public": {"agent", "reader", "operator", "admin", "issued-admin"},
    "agent": {"agent", "operator", "admin", "issued-admin"},
    "reader": {"reader", "operator", "admin", "issued-admin"},
    "operator": {"operator", "admin", "issued-admin"},
    "admin": {"admin", "issued-admin"},
}
ROLES = ("agent", "reader", "operator", "admin", "issued-admin")


def expected_role(method: str, path: str) -> str:
    op = (method, path)
    if op in PUBLIC:
        return "public"
    if op in AGENT_ROUTES:
        return "agent"
    if op in ADMIN_ROUTES:
        return "admin"
    return "reader" if method == "get" else "operator"


def operations(client: TestClient) -> list[tuple[str, str, dict[str, Any]]]:
    schema = client.get("/openapi.json").json()
    return [
        (method, path, op)
        for path, ops in schema["paths"].items()
        for method, op in ops.items()
        if method in {"get", "post", "put", "patch", "delete"}
    ]


def concrete(path: str, keys: Keys) -> str:
    """A real path: the agent's own session (so only roles decide), otherwise unknown ids."""
    values = {
        "session_id": keys.session,
        "slug": "no-such-workspace",
        "label": "no-such-key",
        "name": "app.js",
        "kind": "overlay",
        "agent_id": "nobody",
        "key": "nothing",
        "runtime": "codex",
        "event": "Stop",
    }
    return re.sub(r"\{(\w+)\}", lambda m: values.get(m.group(1), str(uuid.uuid4())), path)


def call(client: TestClient, method: str, path: str, headers: dict[str, str]) -> Any:
    body: dict[str, Any] | None = {} if method in {"post", "put", "patch"} else None
    # The live stream never ends for a caller it lets in; a position past the log is
    # refused (422) before streaming starts, and only after the role check.
    params = {"after": str(2**62)} if path == "/api/stream" else None
    return client.request(method.upper(), path, json=body, headers=headers, params=params)


def test_openapi_states_the_role_of_every_operation(secured: TestClient) -> None:
    ops = operations(secured)
    assert len(ops) > 40
    for method, path, op in ops:
        role = expected_role(method, path)
        assert op.get("x-tachograph-role") == (None if role == "public" else role), (method, path)
        if role != "public":
            assert "403" in op["responses"] and "401" in op["responses"], (method, path)


def test_every_route_with_every_role(secured: TestClient, keys: Keys) -> None:
    checked = 0
    for method, path, _ in operations(secured):
        role = expected_role(method, path)
        url = concrete(path, keys)
        for holder in ROLES:
            before = log_head(secured)
            response = call(secured, method, url, keys.headers(holder))
            if holder in ALLOWED[role]:
                assert response.status_code not in (401, 403), (method, path, holder, response.text)
                continue
            assert response.status_code == 403, (method, path, holder, response.text)
            body = response.json()
            assert body["error"] == "forbidden"
            wanted = "agent" if role == "agent" else role
            assert body["requiredRole"] == wanted and f"needs the {wanted} role" in body["message"]
            assert log_head(secured) == before, (method, path, holder)
            checked += 1
        if role != "public":
            before = log_head(secured)
            anonymous = call(secured, method, url, {})
            assert anonymous.status_code == 401, (method, path)
            assert anonymous.json()["reason"] == "missing"
            assert log_head(secured) == before
    assert checked > 60


def forbidden_count(client: TestClient, route: str, role: str) -> float:
    line = f'tachograph_forbidden_total{{role="{role}",route="{route}"}} '
    for text in client.get("/metrics").text.splitlines():
        if text.startswith(line):
            return float(text[len(line) :])
    return 0.0


def test_forbidden_requests_are_counted_by_route_and_role(secured: TestClient, keys: Keys) -> None:
    route = "/api/settings/autonomy"
    before = forbidden_count(secured, route, "operator")
    for _ in range(2):
        refused = secured.patch(route, json={"evolution": True}, headers=keys.headers("operator"))
        assert refused.status_code == 403
    assert forbidden_count(secured, route, "operator") == before + 2
    settings = secured.get(route, headers=keys.headers("reader")).json()
    assert settings["evolution"] is False
