"""A server that requires credentials, and one key of every role."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from infra.settings import Settings

BOOTSTRAP = "bootstrap-admin-key-for-tests"
ADMIN_HEADERS = {"x-tachograph-key": BOOTSTRAP}


@dataclass
class Keys:
    """Secrets by role; `session` is the session the agent token is bound to."""

    secrets: dict[str, str]
    session: str

    def headers(self, role: str) -> dict[str, str]:
        return {"x-tachograph-key": self.secrets[role]}


def issue(client: TestClient, **body: object) -> str:
    response = client.post("/api/keys", json=body, headers=ADMIN_HEADERS)
    assert response.status_code == 201, response.text
    secret = response.json()["secret"]
    assert isinstance(secret, str)
    return secret


@pytest.fixture
def secured(settings: Settings) -> Iterator[TestClient]:
    app = create_app(settings.with_(api_key=BOOTSTRAP))
    with TestClient(app, raise_server_exceptions=False) as client:
        yield client


@pytest.fixture
def keys(secured: TestClient) -> Keys:
    session = secured.post("/api/sessions", json={"workspaceId": "default"}, headers=ADMIN_HEADERS)
    session_id = session.json()["id"]
    secrets = {
        "admin": BOOTSTRAP,
        "reader": issue(secured, label="rita", role="reader"),
        "operator": issue(secured, label="otto", role="operator"),
        "agent": issue(secured, role="agent", sessionId=session_id),
        "issued-admin": issue(secured, label="ada", role="admin"),
    }
    return Keys(secrets, session_id)


def log_head(client: TestClient) -> int:
    services = client.app.state.services  # type: ignore[attr-defined]
    return int(services.app.recorder.max_notification_id() or 0)
