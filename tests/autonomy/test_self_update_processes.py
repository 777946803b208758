"""Two real `tachograph worker` processes against one PostgreSQL run the idle self-update
job for several minutes of cycles, with tasks completing, failing and retrying: the event
log never shows more than one active self-update task (SPEC §8.4)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from bootstrap import build_services
from infra.log_reader import event_record, iter_events
from infra.settings import Settings
from infra.workspace_paths import contained_path
from tests.support import Proc, env_for
from tests.tasks.conftest import wait_until

pytestmark = pytest.mark.slow

AGENT = str(Path(__file__).with_name("cycle_agent.py"))
WORKSPACES = ("ok-1", "fail-1", "flaky-1", "ok-2", "ok-3")
# Long enough for three cron minutes of cycles (SPEC §8.4 asks for "several minutes").
DURATION_S = 185.0
ACTIVE = {"queued", "running", "cancelling"}
# Task event → status it leaves the task in.
TRANSITIONS = {
    "Task.Created": "queued",
    "Task.Claimed": "running",
    "Task.RetryScheduled": "queued",
    "Task.Requeued": "queued",
    "Task.CancelRequested": "cancelling",
    "Task.Completed": "completed",
    "Task.Failed": "failed",
    "Task.DeadLettered": "dead-letter",
    "Task.Cancelled": "cancelled",
    "Task.Resolved": "completed",
    "Task.Deleted": "deleted",
}


def git_repository(path: Path) -> None:
    """A clean checkout with one commit: what a self-update cycle starts from."""
    path.mkdir()
    (path / "README.md").write_text(f"# {path.name}\n")
    for args in (
        ["init", "-q", "-b", "main"],
        ["add", "-A"],
        ["-c", "user.name=t", "-c", "user.email=t@example.invalid", "commit", "-q", "-m", "1"],
    ):
        subprocess.run(["git", "-C", str(path), *args], check=True)


def worker(settings: Settings, log: Path, state: Path) -> Proc:
    env = {
        **env_for(settings),
        "TACHOGRAPH_TASK_COMMAND": json.dumps(
            [sys.executable, AGENT, "{taskId}", "{workspace}", str(state)]
        ),
        "TACHOGRAPH_TASK_CONCURRENCY": "2",
        "TACHOGRAPH_TASK_POLL_S": "0.1",
        "TACHOGRAPH_TASK_KILL_GRACE_S": "1",
        "TACHOGRAPH_SELF_UPDATE_IDLE_S": "0.2",
        "TACHOGRAPH_SELF_UPDATE_CRON": "* * * * *",
        # Scheduling across workers is under test, not the jail, which would hide the
        # state directory the stand-in writes to (tests/autonomy/test_self_update_jail.py).
        "TACHOGRAPH_SELF_UPDATE_SANDBOX": "none",
    }
    proc = Proc(["worker"], env, log)
    wait_until(lambda: "worker started" in proc.output(), timeout=30, every=0.1)
    return proc


def replay_self_update_tasks(events: list[dict[str, Any]]) -> dict[str, Any]:
    """Walk the log: the most self-update tasks active at once, statuses, gate pairing."""
    status: dict[str, str] = {}
    most_active = 0
    acquired_at: dict[str, int] = {}
    created_at: dict[str, int] = {}
    holder: str | None = None
    gate_errors: list[str] = []
    seen_statuses: set[str] = set()
    for e in events:
        kind, data = e["type"], e["data"]
        if kind == "AutonomyGate.Acquired":
            if holder is not None:
                gate_errors.append(f"acquired at {e['position']} while {holder} held it")
            holder = data["task_id"]
            acquired_at[data["task_id"]] = e["position"]
        elif kind == "AutonomyGate.Released":
            if holder != data["task_id"]:
                gate_errors.append(f"released {data['task_id']} at {e['position']}")
            holder = None
        elif kind in TRANSITIONS:
            task = e["aggregateId"]
            if kind == "Task.Created" and data["source"] == "self-update":
                status[task] = "queued"
                created_at[task] = e["position"]
            elif task in status:
                status[task] = TRANSITIONS[kind]
                seen_statuses.add(status[task])
            most_active = max(most_active, sum(s in ACTIVE for s in status.values()))
    return {
        "most_active": most_active,
        "tasks": len(status),
        "statuses": seen_statuses,
        "gate_errors": gate_errors,
        "acquired_with_creation": all(
            acquired_at.get(task) == position - 2 for task, position in created_at.items()
        ),
    }


@pytest.mark.parametrize("store_kind", ["postgres"], indirect=True)
def test_two_workers_never_run_two_self_update_tasks_at_once(
    settings: Settings, tmp_path: Path
) -> None:
    settings = settings.with_(self_update_cron="* * * * *")
    state = tmp_path / "state"
    state.mkdir()
    setup = build_services(settings)
    try:
        assert setup.autonomy is not None
        for slug in WORKSPACES:
            git_repository(settings.workspace_root / slug)
            path = contained_path(settings.workspace_root, slug)
            setup.app.register_workspace(slug, path, True, "test")
        setup.autonomy.autonomy.update_settings({"self_update": True}, "test")
        assert setup.autonomy.self_update.reconcile(WORKSPACES).created == sorted(WORKSPACES)
    finally:
        setup.close()
    workers = [worker(settings, tmp_path / f"w{n}.log", state) for n in range(2)]
    try:
        deadline = time.monotonic() + DURATION_S
        while time.monotonic() < deadline:
            assert all(w.popen.poll() is None for w in workers), workers[0].output()
            time.sleep(1)
    finally:
        for w in workers:
            if w.popen.poll() is None:
                w.signal(signal.SIGTERM)
        codes = [w.wait(60) for w in workers]
    assert codes == [0, 0], [w.output() for w in workers]
    check = build_services(settings)
    try:
        events = [event_record(check.app, n) for n in iter_events(check.app)]
        check.runner.catch_up()
        rows = check.store.query(
            "SELECT status FROM rm_tasks WHERE source = 'self-update' AND status IN "
            "('queued', 'running', 'cancelling')"
        )
    finally:
        check.close()
    seen = replay_self_update_tasks(events)
    assert seen["most_active"] == 1 and seen["gate_errors"] == [], seen
    assert seen["acquired_with_creation"], "each task must be created with its gate acquisition"
    assert seen["tasks"] >= len(WORKSPACES), seen  # every workspace cycled at least once
    assert {"completed", "failed"} <= seen["statuses"], seen
    assert "queued" in seen["statuses"]  # the flaky workspace's transient retry
    assert len(rows) <= 1
    runs = (state / "runs.log").read_text().split()
    assert set(runs[1::2]) >= set(WORKSPACES)  # both workers' agents ran cycles everywhere
