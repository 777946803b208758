"""Verified replay on both stores: rebuild equals live, drift by projection and key, atomic swap."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from bootstrap import Services, build_services
from infra.settings import Settings
from projections.log_checkpoints import LINKS_TABLE, LogChainProjection
from projections.registry import all_projections
from projections.replay import replay, select_projections
from projections.runner import ensure_schema
from projections.sessions import get_session
from tests.audit_support import bulk_history, mixed_workload
from tests.log_tamper import Tamper
from tests.support import Server, env_for


def test_replay_equals_live_after_a_mixed_workload(client: TestClient, settings: Settings) -> None:
    mixed_workload(client, settings)
    services: Services = client.app.state.services  # type: ignore[attr-defined]
    reports = replay(services.app, services.store, services.projections)
    assert [r.name for r in reports] == [p.name for p in all_projections()]
    assert [r.name for r in reports if r.drift] == []
    rows = {(r.name, t.table): t.live_rows for r in reports for t in r.tables}
    assert rows[("sessions", "sessions")] == 9 and rows[("hook_audit", "hook_audit")] > 0
    head = services.app.recorder.max_notification_id()
    assert {r.position for r in reports} == {head}
    # Nothing of the rebuild is left behind.
    assert (
        services.store.query("SELECT name FROM projection_tracking WHERE name LIKE 'rebuild:%'")
        == []
    )


def run_cli(settings: Settings, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cli.main", *args],
        env=env_for(settings),
        capture_output=True,
        text=True,
        timeout=120,
        cwd=Path(__file__).resolve().parents[1],
    )


def test_drift_is_reported_by_projection_and_key(services: Services, settings: Settings) -> None:
    bulk_history(services.app, 20)
    services.runner.catch_up()
    victim = services.store.query("SELECT id FROM rm_sessions ORDER BY position LIMIT 1")[0]["id"]
    with services.store.transaction() as cur:
        cur.execute("UPDATE rm_sessions SET title = 'tampered' WHERE id = ?", (victim,))
        cur.execute("INSERT INTO rm_session_messages (id, messages) VALUES ('bogus', '[]')")
        cur.execute("DELETE FROM rm_workspaces WHERE id = 'default'")
    result = run_cli(settings, "replay", "--projection", "sessions", "--projection", "workspaces")
    assert result.returncode == 1, result.stdout + result.stderr
    out = result.stdout
    assert "sessions: DRIFT" in out and f"changed: id={victim}" in out
    assert "only live: id=bogus" in out
    assert "workspaces: DRIFT" in out and "only rebuilt: id=default" in out
    assert "hook_audit" not in out  # only the projections asked for
    assert "events/s" in result.stderr  # the progress bar and the rate
    as_json = json.loads(run_cli(settings, "replay", "--json", "--projection", "sessions").stdout)
    [sessions] = as_json
    assert sessions["drift"] is True
    assert {t["table"]: t["changed"] for t in sessions["tables"]}["sessions"] == [f"id={victim}"]
    unknown = run_cli(settings, "replay", "--projection", "nope")
    assert unknown.returncode == 2 and "Unknown projection 'nope'" in unknown.stderr


def index_names(services: Services) -> list[str]:
    if services.store.dialect == "sqlite":
        sql = "SELECT name FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL"
    else:
        sql = "SELECT indexname AS name FROM pg_indexes WHERE schemaname = current_schema()"
    return sorted(r["name"] for r in services.store.query(sql))


def test_swap_replaces_drifted_tables_and_the_live_runner_carries_on(services: Services) -> None:
    services.start()
    head = bulk_history(services.app, 20)
    assert services.runner.wait_for(head, 5)
    victim = services.store.query("SELECT id FROM rm_sessions ORDER BY position LIMIT 1")[0]["id"]
    with services.store.transaction() as cur:
        cur.execute("UPDATE rm_sessions SET title = 'tampered' WHERE id = ?", (victim,))
    indexes = index_names(services)
    reports = replay(services.app, services.store, services.projections, swap=True)
    assert [r.name for r in reports if r.drift] == ["sessions"]
    assert all(r.swapped for r in reports)
    assert get_session(services.store, victim, 60)["title"] == "renamed s0"  # type: ignore[index]
    # The live runner keeps applying new events to the swapped-in tables.
    recorded = services.app.create_session("default", "after the swap", "test")
    assert recorded.position is not None and services.runner.wait_for(recorded.position, 5)
    assert get_session(services.store, str(recorded.aggregate_id), 60) is not None
    sessions = select_projections(services.projections, ["sessions"])
    [again] = replay(services.app, services.store, sessions)
    assert not again.drift
    # Index names are the live ones again, so the next start-up creates no duplicates.
    assert index_names(services) == indexes
    ensure_schema(services.store, services.projections)
    assert index_names(services) == indexes


def test_swap_of_the_chain_is_refused_when_the_log_was_altered(
    services: Services, settings: Settings
) -> None:
    bulk_history(services.app, 100)
    services.runner.catch_up()
    Tamper(settings).flip_payload_byte(150, b"auditor")
    live_links = services.store.query(f"SELECT * FROM {LINKS_TABLE} ORDER BY position")
    chain = [p for p in services.projections if isinstance(p, LogChainProjection)]
    [report] = replay(services.app, services.store, chain, swap=True)
    assert report.drift and not report.swapped and report.swap_refused
    # The links (and the leaves beside them) drift from the altered event on; the tree's
    # stored subtrees may too, depending on where the event falls.
    links = next(t for t in report.tables if t.table.endswith("log_links"))
    assert links.changed[0] == "position=150" and len(links.changed) == 20  # capped list
    assert services.store.query(f"SELECT * FROM {LINKS_TABLE} ORDER BY position") == live_links


@pytest.mark.slow
def test_swap_under_concurrent_reads_never_fails_or_goes_empty(
    settings: Settings, tmp_path: Path
) -> None:
    server = Server(settings, tmp_path / "serve.log")
    server.wait_ready()
    stop = threading.Event()
    problems: list[str] = []
    created: list[str] = []
    reads = [0]

    def read_loop(path: str) -> None:
        with httpx.Client(base_url=server.url, timeout=10) as http:
            while not stop.is_set():
                response = http.get(path, params={"limit": 200})
                items = response.json().get("items") if response.status_code == 200 else None
                if not items:
                    problems.append(f"{path} {response.status_code} {response.text[:200]}")
                reads[0] += 1

    def write_loop() -> None:
        with httpx.Client(base_url=server.url, timeout=10) as http:
            while not stop.is_set():
                response = http.post("/api/sessions", json={"workspaceId": "default"})
                if response.status_code != 201:
                    problems.append(f"write {response.status_code} {response.text[:200]}")
                else:
                    created.append(response.json()["id"])
                time.sleep(0.01)

    try:
        with httpx.Client(base_url=server.url, timeout=10) as http:
            for i in range(30):
                created.append(
                    http.post("/api/sessions", json={"workspaceId": "default"}).json()["id"]
                )
                if i % 3 == 0:
                    task = {"workspaceId": "default", "prompt": f"task {i}"}
                    assert http.post("/api/tasks", json=task).status_code == 201
        # Two threads poll the task board (as dashboards do), one the session list.
        paths = ["/api/tasks", "/api/tasks", "/api/sessions"]
        threads = [threading.Thread(target=read_loop, args=(path,)) for path in paths]
        threads.append(threading.Thread(target=write_loop))
        for t in threads:
            t.start()
        for _ in range(3):
            swap = run_cli(settings, "replay", "--swap")
            assert swap.returncode == 0, swap.stdout + swap.stderr
            projections = [line for line in swap.stdout.splitlines() if not line.startswith(" ")]
            assert swap.stdout.count("swapped: live tables replaced") == len(projections) > 5
        stop.set()
        for t in threads:
            t.join()
        assert problems == [] and reads[0] > 20
        with httpx.Client(base_url=server.url, timeout=10) as http:
            missing = [i for i in created if http.get(f"/api/sessions/{i}").status_code != 200]
        assert missing == [] and len(created) > 30
        after = run_cli(settings, "replay")
        assert after.returncode == 0 and "DRIFT" not in after.stdout, after.stdout
    finally:
        stop.set()
        server.kill()


# rm_hook_audit as releases before the session-ordered key created it.
EARLIER_HOOK_AUDIT = [
    "CREATE TABLE rm_hook_audit (id TEXT PRIMARY KEY, session_id TEXT NOT NULL, "
    "dispatch_id TEXT NOT NULL, turn_id TEXT, event TEXT NOT NULL, handler_id TEXT, "
    "outcome TEXT NOT NULL, failure TEXT, reason TEXT, duration_ms INTEGER, "
    "at TEXT NOT NULL, position BIGINT NOT NULL, seq INTEGER NOT NULL)",
    "CREATE INDEX rm_hook_audit_session ON rm_hook_audit (session_id, position, seq)",
    "CREATE INDEX rm_hook_audit_at ON rm_hook_audit (at)",
    "CREATE INDEX rm_hook_audit_turn ON rm_hook_audit (session_id, turn_id, event, outcome)",
]


def test_a_hook_audit_table_of_an_earlier_release_is_served_compared_and_swapped(
    settings: Settings,
) -> None:
    earlier = build_services(settings)
    with earlier.store.transaction() as cur:
        cur.execute("DROP TABLE rm_hook_audit")
        for stmt in EARLIER_HOOK_AUDIT:
            cur.execute(stmt)
    earlier.stop()
    with TestClient(create_app(settings)) as client:
        mixed_workload(client, settings)
        services: Services = client.app.state.services  # type: ignore[attr-defined]
        assert services.runner.wait_for(services.app.recorder.max_notification_id() or 0, 5)
        [session, *_] = client.get("/api/sessions", params={"limit": 100}).json()["items"]
        hooks = f"/api/sessions/{session['id']}/hooks"
        audited = client.get(hooks).json()["items"]
        events = {r["event"] for r in audited}
        assert events == {"SessionStart", "UserPromptSubmit", "PreToolUse", "PostToolUse", "Stop"}
        [hook_audit] = select_projections(services.projections, ["hook_audit"])
        # Rows are matched by key, although the two tables are keyed differently.
        [report] = replay(services.app, services.store, [hook_audit])
        assert not report.drift and report.tables[0].live_rows > 0
        [report] = replay(services.app, services.store, [hook_audit], swap=True)
        assert report.swapped
        [again] = replay(services.app, services.store, [hook_audit])
        assert not again.drift
        assert client.get(hooks).json()["items"] == audited
