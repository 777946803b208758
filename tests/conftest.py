"""Shared fixtures: every storage-touching test runs on SQLite and on PostgreSQL."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from bootstrap import Services, build_services
from infra.event_store import open_application, schema_lock
from infra.settings import DatabaseURL, Settings
from tests.support import PG_URL

STORES = ["sqlite", "postgres"]


def pg_url() -> DatabaseURL:
    parsed = Settings.from_env({"TACHOGRAPH_DATABASE_URL": PG_URL}).database_url
    assert parsed is not None
    return parsed


@pytest.fixture(params=STORES)
def store_kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def settings(store_kind: str, tmp_path: Path) -> Iterator[Settings]:
    """Fresh settings per test: a temp data dir, or a fresh PostgreSQL schema."""
    root = tmp_path / "workspace"
    root.mkdir()
    base = Settings(data_dir=tmp_path / "data", workspace_root=root)
    if store_kind == "sqlite":
        yield base
        return
    schema = f"t_{uuid.uuid4().hex[:12]}"
    url = pg_url()
    yield base.with_(database_url=url, database_schema=schema)
    with psycopg.connect(url.conninfo(), autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


@pytest.fixture
def services(settings: Settings) -> Iterator[Services]:
    built = build_services(settings)
    try:
        yield built
    finally:
        built.stop()


@pytest.fixture
def client(settings: Settings) -> Iterator[TestClient]:
    app = create_app(settings)
    with TestClient(app, raise_server_exceptions=False) as test_client:
        yield test_client


@pytest.fixture
def recorder(settings: Settings) -> Iterator[Any]:
    """The event store's application recorder alone (no services, no projections)."""
    with schema_lock(settings):
        app = open_application(settings)
    try:
        yield app.recorder
    finally:
        app.close()
