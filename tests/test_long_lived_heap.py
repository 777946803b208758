"""A long-lived app freezes its start-up heap out of full collections and collects its
young objects less often; others do neither."""

from __future__ import annotations

import gc

from fastapi.testclient import TestClient

from api.app import create_app
from bootstrap import SERVING_GC_THRESHOLD
from infra.settings import Settings


def test_only_a_long_lived_app_freezes_what_start_up_built(settings: Settings) -> None:
    gc.unfreeze()
    threshold = gc.get_threshold()
    try:
        with TestClient(create_app(settings)) as client:
            assert client.get("/api/health").status_code == 200
            assert gc.get_freeze_count() == 0  # a test process must stay collectable
            assert gc.get_threshold() == threshold
        with TestClient(create_app(settings, long_lived=True)) as client:
            assert client.get("/api/health").status_code == 200
            assert gc.get_freeze_count() > 10_000  # modules, routes, services...
            assert gc.get_threshold() == (SERVING_GC_THRESHOLD, *threshold[1:])
    finally:
        gc.unfreeze()
        gc.set_threshold(*threshold)
