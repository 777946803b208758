"""Twenty concurrent reverts of one revision against a real `tachograph serve`, on both
stores: exactly one compensation, in the log as well as in the answers (SPEC §8.3)."""

from __future__ import annotations

import threading
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import pytest

from infra.settings import Settings
from tests.support import Server
from tests.tasks.conftest import wait_until

pytestmark = pytest.mark.slow

RACERS = 20


def test_twenty_racing_reverts_make_exactly_one_compensation(
    settings: Settings, tmp_path: Path
) -> None:
    server = Server(settings, tmp_path / "serve.log", {"TACHOGRAPH_REFLECTION_INTERVAL_S": "0.1"})
    try:
        server.wait_ready()
        with httpx.Client(base_url=server.url, timeout=30) as api:
            assert api.patch("/api/settings/autonomy", json={"evolution": True}).status_code == 200
            signal = {"agentId": "claude", "traceId": "t", "kind": "failure", "goal": "ship"}
            assert api.post("/api/autonomy/signals", json={**signal, "failure": "x"}).is_success
            revision = wait_until(
                lambda: next(iter(api.get("/api/autonomy/revisions").json()["items"]), None),
                timeout=30,
                every=0.1,
            )
        answers: list[tuple[int, str]] = []
        barrier = threading.Barrier(RACERS)

        def race() -> None:
            with httpx.Client(base_url=server.url, timeout=60) as own:
                barrier.wait()
                response = own.post(f"/api/autonomy/revisions/{revision['id']}/revert")
                body: dict[str, Any] = response.json()
                answers.append((response.status_code, body.get("error", "")))

        threads = [threading.Thread(target=race) for _ in range(RACERS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(90)
        assert Counter(answers) == Counter({(200, ""): 1, (409, "already_reverted"): RACERS - 1})
        with httpx.Client(base_url=server.url, timeout=30) as api:
            path = f"/api/autonomy/targets/overlay/claude/{revision['key']}?workspaceId=default"
            target = api.get(path).json()
            stream = api.get(f"/api/streams/{target['id']}").json()["events"]
            compensations = [
                e
                for e in stream
                if e["type"] == "LearnedTarget.Revised"
                and e["data"]["reverts_revision_id"] == revision["id"]
            ]
            assert len(compensations) == 1
            assert (
                target["content"] is None
                and target["latestRevisionId"] == (compensations[0]["data"]["revision_id"])
            )
    finally:
        server.kill()
