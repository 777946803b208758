"""Database loss: 503 database_unavailable quickly, health says so, service resumes by itself."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import replace

import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from infra.settings import Settings
from tests.tcp_proxy import TcpProxy


@pytest.fixture
def proxy(settings: Settings) -> Iterator[TcpProxy]:
    assert settings.database_url is not None
    tcp = TcpProxy(settings.database_url.host, settings.database_url.port)
    yield tcp
    tcp.close()


@pytest.mark.parametrize("store_kind", ["postgres"], indirect=True)
def test_outage_answers_503_and_recovers(settings: Settings, proxy: TcpProxy) -> None:
    assert settings.database_url is not None
    via_proxy = settings.with_(database_url=replace(settings.database_url, port=proxy.port))
    with TestClient(create_app(via_proxy), raise_server_exceptions=False) as client:
        created = client.post("/api/sessions", json={"workspaceId": "default"})
        assert created.status_code == 201
        proxy.cut()
        started = time.monotonic()
        health = client.get("/api/health")
        assert health.status_code == 503
        assert health.json()["database"] == "unreachable"
        write = client.post("/api/sessions", json={"workspaceId": "default"})
        assert write.status_code == 503
        assert write.json()["error"] == "database_unavailable"
        assert time.monotonic() - started < 15
        proxy.restore()
        deadline = time.monotonic() + 20
        while client.get("/api/health").status_code != 200 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert client.get("/api/health").status_code == 200
        again = client.post("/api/sessions", json={"workspaceId": "default"})
        assert again.status_code == 201
        ids = {s["id"] for s in client.get("/api/sessions").json()["items"]}
        assert {created.json()["id"], again.json()["id"]} <= ids
