"""Two `serve` replicas and two `worker`s on one PostgreSQL schema under a mixed workload.

Bounded: the workload runs until a schedule slot has passed (at most about a minute,
usually less), then every cross-process invariant of SPEC §2 is checked on the log
itself, both replicas must answer identical reads at the log head, and a full replay
must equal the live read models.
"""

from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import pytest

from infra.settings import Settings
from tests.support import Proc, Server, env_for, free_port

pytestmark = [pytest.mark.slow, pytest.mark.parametrize("store_kind", ["postgres"], indirect=True)]

FAKE_AGENT = str(Path(__file__).resolve().parent / "tasks" / "fake_agent.py")
TERMINAL = {"completed", "failed", "cancelled", "dead-letter"}


def shared_env(tmp_path: Path) -> dict[str, str]:
    return {
        "TACHOGRAPH_DATABASE_POOL_SIZE": "2",  # four processes, gentle on max_connections
        "TACHOGRAPH_TASK_POLL_S": "0.2",
        "TACHOGRAPH_REFLECTION_INTERVAL_S": "0.3",
        "TACHOGRAPH_SELF_UPDATE_IDLE_S": "0.3",
        "TACHOGRAPH_SELF_UPDATE_CRON": "* * * * *",  # a cycle is due from the next minute on
        "TACHOGRAPH_LOG_SIGNING_KEY": "multi-replica-" + "k" * 24,
    }


def worker_env(tmp_path: Path) -> dict[str, str]:
    return {
        "TACHOGRAPH_TASK_COMMAND": json.dumps([sys.executable, FAKE_AGENT, "{prompt}"]),
        "TACHOGRAPH_TASK_CONCURRENCY": "2",
        "TACHOGRAPH_TASK_TIMEOUT_S": "30",
    }


class Cluster:
    def __init__(self, settings: Settings, tmp_path: Path) -> None:
        common = shared_env(tmp_path)
        self.replicas = [Server(settings, tmp_path / f"serve-{n}.log", common) for n in "ab"]
        self.metrics_ports = [free_port(), free_port()]
        self.workers = [
            Proc(
                ["worker", "--metrics-port", str(port)],
                {**env_for(settings), **common, **worker_env(tmp_path)},
                tmp_path / f"worker-{n}.log",
            )
            for n, port in zip("12", self.metrics_ports, strict=True)
        ]
        self.processes: list[Proc] = [*self.replicas, *self.workers]

    def wait_ready(self) -> None:
        for replica in self.replicas:
            replica.wait_ready(timeout=60)
        deadline = time.monotonic() + 60
        for worker in self.workers:
            while "worker started" not in worker.output() and time.monotonic() < deadline:
                time.sleep(0.1)
            assert "worker started" in worker.output(), worker.output()

    def stop(self) -> list[int]:
        for p in self.processes:
            if p.popen.poll() is None:
                p.signal(signal.SIGTERM)
        return [p.wait(60) for p in self.processes]

    def kill(self) -> None:
        for p in self.processes:
            p.kill()


@pytest.fixture
def cluster(settings: Settings, tmp_path: Path) -> Iterator[Cluster]:
    started = Cluster(settings, tmp_path)
    try:
        started.wait_ready()
        yield started
    finally:
        started.kill()


class Workload:
    """Client threads spreading requests over both replicas; records what must hold."""

    def __init__(self, urls: list[str], workspace_dir: Path) -> None:
        self.urls = urls
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.errors: list[str] = []
        self.revision_rounds: list[list[int]] = []
        self.duplicate_dispatches: list[tuple[str, str]] = []
        self.signal_ids: dict[str, set[str]] = defaultdict(set)
        self.record = workspace_dir / "runs.jsonl"
        self.tasks: list[str] = []

    def client(self) -> httpx.Client:
        return httpx.Client(timeout=30)

    def url(self) -> str:
        return random.choice(self.urls)

    def check(self, response: httpx.Response, *allowed: int) -> httpx.Response:
        if response.status_code not in allowed:
            with self.lock:
                self.errors.append(
                    f"{response.request.method} {response.request.url.path}: "
                    f"{response.status_code} {response.text[:300]}"
                )
        return response

    def run(self, *loops: Callable[[httpx.Client], None]) -> list[threading.Thread]:
        def forever(loop: Callable[[httpx.Client], None]) -> None:
            with self.client() as http:
                while not self.stop.is_set():
                    try:
                        loop(http)
                    except httpx.HTTPError as exc:
                        with self.lock:
                            self.errors.append(f"{loop.__name__}: {exc!r}")

        threads = [threading.Thread(target=forever, args=(loop,)) for loop in loops]
        for t in threads:
            t.start()
        return threads

    def sessions_and_hooks(self, http: httpx.Client) -> None:
        a, b = self.urls
        created = self.check(
            http.post(f"{self.url()}/api/sessions", json={"workspaceId": "default"}), 201
        )
        session_id = created.json()["id"]
        for revision in range(2):
            body = {"revision": revision, "messages": ["racing"]}
            path = f"/api/sessions/{session_id}"
            codes = race([partial(httpx.put, u + path, json=body, timeout=30) for u in (a, b)])
            with self.lock:
                self.revision_rounds.append(codes)
        for n in range(3):
            event_id = f"{session_id}:{n}"
            body = {"event": "PostToolUse", "eventId": event_id, "toolName": "Bash"}
            first = self.check(http.post(f"{a}/api/sessions/{session_id}/events", json=body), 200)
            again = self.check(http.post(f"{b}/api/sessions/{session_id}/events", json=body), 200)
            with self.lock:
                self.duplicate_dispatches.append(
                    (first.json()["dispatchId"], again.json()["dispatchId"])
                )
        if random.random() < 0.3:
            self.check(http.delete(f"{self.url()}/api/sessions/{session_id}"), 204)

    def tasks_loop(self, http: httpx.Client) -> None:
        prompt = json.dumps({"record": str(self.record), "lines": ["working", "done"]})
        created = self.check(
            http.post(f"{self.url()}/api/tasks", json={"workspaceId": "default", "prompt": prompt}),
            201,
        )
        task_id = created.json()["id"]
        with self.lock:
            self.tasks.append(task_id)
        if random.random() < 0.3:
            # Either replica may see it queued, running or already finished.
            self.check(http.post(f"{self.url()}/api/tasks/{task_id}/cancel"), 200, 409)
        time.sleep(0.2)

    def signals_loop(self, http: httpx.Client) -> None:
        trace = uuid.uuid4().hex
        body = {
            "agentId": "agent-1",
            "traceId": trace,
            "kind": "failure",
            "goal": "fix the build",
            "failure": f"tests failed in run {trace}",
            "failureClass": "tests",
        }
        for base in self.urls:  # the same evidence through both replicas: one signal
            answer = self.check(http.post(f"{base}/api/autonomy/signals", json=body), 200, 201)
            with self.lock:
                self.signal_ids[trace].add(answer.json()["id"])
        time.sleep(0.3)


def race(calls: list[Callable[[], httpx.Response]]) -> list[int]:
    """Start the calls together (one thread each); their status codes, sorted."""
    barrier = threading.Barrier(len(calls))
    codes: list[int] = []

    def run(call: Callable[[], httpx.Response]) -> None:
        barrier.wait()
        codes.append(call().status_code)

    racers = [threading.Thread(target=run, args=(c,)) for c in calls]
    for r in racers:
        r.start()
    for r in racers:
        r.join()
    return sorted(codes)


def all_events(http: httpx.Client, base: str) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    after = 0
    while True:
        page = http.get(f"{base}/api/events", params={"after": after, "limit": 500}).json()
        events.extend(page["events"])
        if page["next"] is None:
            return events
        after = page["next"]


def test_two_replicas_and_two_workers_keep_every_invariant(
    cluster: Cluster, settings: Settings, tmp_path: Path
) -> None:
    a, b = (r.url for r in cluster.replicas)
    workspace = settings.workspace_root / "cycled"
    workspace.mkdir()
    with httpx.Client(timeout=30) as http:
        http.patch(f"{a}/api/settings/autonomy", json={"evolution": True, "selfUpdate": True})
        http.post(
            f"{b}/api/workspaces", json={"id": "cycled", "path": "cycled", "selfUpdate": True}
        )
        http.post(f"{a}/api/autonomy/reconcile")
        schedules = [
            http.post(
                f"{url}/api/schedules",
                json={
                    "workspaceId": "default",
                    "name": f"every minute {n}",
                    "cron": "* * * * *",
                    "prompt": json.dumps({"record": str(tmp_path / "runs.jsonl")}),
                },
            ).json()["id"]
            for n, url in enumerate((a, b))
        ]

        load = Workload([a, b], tmp_path)
        threads = load.run(
            load.sessions_and_hooks, load.sessions_and_hooks, load.tasks_loop, load.signals_loop
        )
        # Run past the next minute boundary so the schedules fire (materialised by 4 processes).
        now = datetime.now(UTC)
        time.sleep(max(8.0, 63 - now.second - now.microsecond / 1e6))

        # Reverts racing on two replicas: at most one compensation per revision.
        revisions = http.get(f"{a}/api/autonomy/revisions").json()["items"]
        reverts: list[list[int]] = []
        for revision in [r for r in revisions if r["revertsRevisionId"] is None][:3]:
            path = f"/api/autonomy/revisions/{revision['id']}/revert"
            reverts.append(race([partial(httpx.post, u + path, timeout=30) for u in (a, b)]))
        load.stop.set()
        for t in threads:
            t.join(60)

        # Let the workers finish what is queued (bounded), then look at the log.
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            rows = http.get(f"{a}/api/tasks", params={"limit": 200}).json()["items"]
            if all(r["status"] in TERMINAL for r in rows):
                break
            time.sleep(0.5)
        # Now idle: four processes race to start a self-update cycle; the gate admits one.
        while time.monotonic() < deadline:
            cycles = http.get(f"{a}/api/tasks", params={"source": "self-update"}).json()["items"]
            if cycles and all(r["status"] in TERMINAL for r in cycles):
                break
            time.sleep(0.5)
        events = all_events(http, a)
        head = events[-1]["position"]
        reads = [
            "/api/sessions",
            "/api/tasks",
            "/api/schedules",
            "/api/autonomy/signals",
            "/api/autonomy/revisions",
            "/api/workspaces",
        ]
        for path in reads:
            seen = [
                http.get(f"{base}{path}", params={"minPosition": head}).json() for base in (a, b)
            ]
            assert seen[0] == seen[1], path
        worker_metrics = [
            httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
            for port in cluster.metrics_ports
        ]

    assert not load.errors, load.errors[:10]
    assert load.tasks and load.revision_rounds and load.duplicate_dispatches
    # Revision semantics across replicas: exactly one writer wins each round.
    assert all(r == [200, 409] for r in load.revision_rounds), load.revision_rounds
    # Idempotent hooks across replicas: one eventId, one dispatch.
    assert all(x == y for x, y in load.duplicate_dispatches)
    # Signals deduplicate across replicas.
    assert all(len(ids) == 1 for ids in load.signal_ids.values())
    # Racing reverts: never two compensations of one revision.
    assert all(codes.count(200) <= 1 for codes in reverts), reverts

    by_type: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for e in events:
        by_type[e["type"]].append(e)
    created = Counter(e["aggregateId"] for e in by_type["HookDispatch.Created"])
    assert max(created.values()) == 1, "a dispatch was created twice"
    # One claim per task attempt, and each attempt ran once (the fake agent logs every run).
    claims = Counter((e["aggregateId"], e["data"]["attempt"]) for e in by_type["Task.Claimed"])
    assert claims and max(claims.values()) == 1
    runs = [json.loads(line) for line in (tmp_path / "runs.jsonl").read_text().splitlines()]
    turns = Counter(run["env"]["TACHOGRAPH_TURN_ID"] for run in runs)
    assert turns and max(turns.values()) == 1, "an attempt ran twice"
    # One materialisation per schedule slot, even with four processes materialising.
    every_slot = Counter((e["aggregateId"], e["data"]["due_at"]) for e in by_type["Schedule.Fired"])
    assert max(every_slot.values()) == 1
    fired = [slot for slot in every_slot if slot[0] in schedules]
    assert {schedule for schedule, _ in fired} == set(schedules), "the schedules never fired"
    scheduled = [e for e in by_type["Task.Created"] if e["data"]["schedule_id"] in schedules]
    assert len(scheduled) == len(fired)
    # At most one self-update task active at any point of the log.
    assert max_active_self_update(events) == 1
    assert by_type["Signal.Created"] and by_type["Task.Completed"]
    compensations = Counter(
        e["data"]["reverts_revision_id"]
        for e in by_type["LearnedTarget.Revised"]
        if e["data"]["reverts_revision_id"]
    )
    assert not compensations or max(compensations.values()) == 1

    for text in worker_metrics:
        assert 'tachograph_projection_position{projection="tasks"}' in text
        assert "tachograph_scheduler_job_runs_total" in text

    # A full replay equals the live read models while every process is still running.
    replay = subprocess.run(
        [sys.executable, "-m", "cli.main", "replay"],
        env={**env_for(settings), **shared_env(tmp_path)},
        capture_output=True,
        text=True,
        timeout=300,
        cwd=Path(__file__).resolve().parents[1],
        check=False,
    )
    assert replay.returncode == 0, replay.stdout + replay.stderr
    assert cluster.stop() == [0, 0, 0, 0]


def max_active_self_update(events: list[dict[str, Any]]) -> int:
    """Replay task lifecycles of self-update tasks in log order; the most active at once."""
    self_update: set[str] = set()
    active: set[str] = set()
    peak = 0
    ends = {"Task.Completed", "Task.Failed", "Task.Cancelled", "Task.DeadLettered", "Task.Deleted"}
    for e in events:
        task = e["aggregateId"]
        if e["type"] == "Task.Created" and e["data"]["source"] == "self-update":
            self_update.add(task)
            active.add(task)
        elif task in self_update:
            if e["type"] in ends:
                active.discard(task)
            elif e["type"] in ("Task.RetryScheduled", "Task.Requeued"):
                active.add(task)
        peak = max(peak, len(active))
    return peak
