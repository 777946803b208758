"""Real `tachograph worker` processes: shared work runs once, a killed worker is recovered."""

from __future__ import annotations

import json
import signal
import sys
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from bootstrap import Services, build_services
from domain.schedule_service import ScheduleService
from infra.settings import Settings
from projections.tasks import get_task
from scheduler.cron import cron_fire_times
from scheduler.liveness import pid_alive
from tests.support import Proc, env_for
from tests.tasks.conftest import FAKE_AGENT, Clock, wait_until

pytestmark = pytest.mark.slow


def worker(settings: Settings, log: Path, concurrency: int = 4) -> Proc:
    env = {
        **env_for(settings),
        "TACHOGRAPH_TASK_COMMAND": json.dumps([sys.executable, FAKE_AGENT, "{prompt}"]),
        "TACHOGRAPH_TASK_CONCURRENCY": str(concurrency),
        "TACHOGRAPH_TASK_POLL_S": "0.1",
        "TACHOGRAPH_TASK_KILL_GRACE_S": "1",
    }
    proc = Proc(["worker"], env, log)
    try:
        wait_until(lambda: "worker started" in proc.output(), timeout=30, every=0.1)
    except AssertionError:
        proc.kill()
        raise AssertionError(f"worker did not start:\n{proc.output()}") from None
    return proc


def stop(proc: Proc) -> None:
    if proc.popen.poll() is None:
        proc.signal(signal.SIGTERM)
    assert proc.wait(30) == 0, proc.output()


def records(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def read(services: Services, task_id: str) -> dict[str, Any]:
    services.runner.catch_up()
    found = get_task(services.store, task_id)
    assert found is not None
    return found


@pytest.mark.parametrize("store_kind", ["postgres"], indirect=True)
def test_two_workers_run_every_task_exactly_once_and_a_due_slot_once(
    settings: Settings, tmp_path: Path
) -> None:
    record = tmp_path / "runs.jsonl"
    setup = build_services(settings)
    try:
        assert setup.tasks is not None
        prompt = json.dumps({"record": str(record), "lines": ["ok"]})
        ids = [
            str(setup.tasks.service.create("default", prompt, None, 3, "t").aggregate_id)
            for _ in range(200)
        ]
        # A daily slot half an hour ago, created before it: due now, next due tomorrow.
        slot = datetime.now(UTC) - timedelta(minutes=30)
        past = ScheduleService(
            setup.app, cron_fire_times("UTC"), clock=Clock(slot - timedelta(minutes=30))
        )
        cron = f"{slot.minute} {slot.hour} * * *"
        schedule_id = past.create("default", "due", cron, prompt, None, 2, "t").aggregate_id
    finally:
        setup.close()
    check = build_services(settings)
    workers = [worker(settings, tmp_path / "w0.log")]
    try:
        workers.append(worker(settings, tmp_path / "w1.log"))

        def completed() -> bool:
            rows = check.store.query(
                "SELECT COUNT(*) AS n FROM rm_tasks WHERE status = 'completed' AND kind = 'task'"
            )
            return int(rows[0]["n"]) == 201

        # Stop only once everything is done: a stop mid-attempt requeues (by design).
        wait_until(completed, timeout=120, every=0.2)
        for w in workers:
            stop(w)
        runs = Counter(r["env"]["TACHOGRAPH_TASK_ID"] for r in records(record))
        twice = [r for r in records(record) if runs[r["env"]["TACHOGRAPH_TASK_ID"]] > 1]
        assert len(runs) == 201 and not twice, twice
        for task_id in ids:
            row = read(check, task_id)
            assert (row["status"], row["attemptCount"]) == ("completed", 1), row
        scheduled = check.store.query(
            "SELECT id, max_attempts FROM rm_tasks WHERE schedule_id = ?", (str(schedule_id),)
        )
        assert len(scheduled) == 1 and scheduled[0]["max_attempts"] == 2
        assert set(runs) == set(ids) | {scheduled[0]["id"]}
    finally:
        for w in workers:
            if w.popen.poll() is None:
                w.kill()
        check.close()


def test_sigkill_of_a_worker_mid_task_then_restart_applies_recovery(
    settings: Settings, tmp_path: Path
) -> None:
    record = tmp_path / "runs.jsonl"
    setup = build_services(settings)
    try:
        assert setup.tasks is not None
        plan = {"record": str(record), "sleep_if_first": 60, "lines": ["second try worked"]}
        again = setup.tasks.service.create("default", json.dumps(plan), None, 3, "t")
        exhausted = setup.tasks.service.create("default", json.dumps(plan), None, 1, "t")
    finally:
        setup.close()
    first = worker(settings, tmp_path / "w1.log", concurrency=2)
    try:
        wait_until(lambda: len(records(record)) == 2, timeout=30)
    finally:
        first.kill()  # SIGKILL, mid-task
    agents = [r["pid"] for r in records(record)]
    # The agents die with their worker (parent-death signal), leaving no orphans.
    wait_until(lambda: not any(pid_alive(pid) for pid in agents), timeout=10)
    second = worker(settings, tmp_path / "w2.log", concurrency=2)
    check = build_services(settings)
    try:
        done = wait_until(
            lambda: (r := read(check, str(again.aggregate_id)))["status"] == "completed" and r,
            timeout=30,
        )
        assert (done["attemptCount"], done["outcome"]) == (2, "second try worked")
        assert {a["attempt"] for a in done["activity"]} >= {2}
        dead = read(check, str(exhausted.aggregate_id))
        assert (dead["status"], dead["attemptCount"], dead["lastErrorClass"]) == (
            "dead-letter",
            1,
            "infrastructure",
        )
        assert dead["remediationTaskId"] is not None
    finally:
        check.close()
        stop(second)
