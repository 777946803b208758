"""A long-lived app freezes its start-up heap out of full collections; others do not."""

from __future__ import annotations

import gc

from fastapi.testclient import TestClient

from api.app import create_app
from infra.settings import Settings


def test_only_a_long_lived_app_freezes_what_start_up_built(settings: Settings) -> None:
    gc.unfreeze()
    try:
        with TestClient(create_app(settings)) as client:
            assert client.get("/api/health").status_code == 200
            assert gc.get_freeze_count() == 0  # a test process must stay collectable
        with TestClient(create_app(settings, long_lived=True)) as client:
            assert client.get("/api/health").status_code == 200
            assert gc.get_freeze_count() > 10_000  # modules, routes, services...
    finally:
        gc.unfreeze()
