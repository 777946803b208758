"""The command executor with a real fake-agent process, on both stores (SPEC §7.2)."""

from __future__ import annotations

import functools
import json
import subprocess
import sys
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest
from eventsourcing.application import AggregateNotFoundError
from eventsourcing.domain import Aggregate

from bootstrap import Services, build_services
from domain.hook_dispatch_record import HookDispatch, dispatch_id_for
from domain.task import remediation_id
from domain.transcript import transcript_id
from infra.settings import Settings
from projections.base import iso
from projections.tasks import get_task
from tests.tasks.conftest import FAKE_AGENT, settled, wait_until


def submit(services: Services, plan: dict[str, Any] | str, **kwargs: Any) -> UUID:
    assert services.tasks is not None
    prompt = plan if isinstance(plan, str) else json.dumps(plan)
    return services.tasks.service.create(
        "default", prompt, kwargs.pop("model", None), kwargs.pop("max_attempts", 3), "t", **kwargs
    ).aggregate_id


def row(services: Services, task_id: UUID) -> dict[str, Any]:
    settled(services)
    found = get_task(services.store, str(task_id))
    assert found is not None
    return found


def ends(services: Services, task_id: UUID, *states: str) -> dict[str, Any]:
    """Wait until the task reaches one of `states` in the read model."""
    found: dict[str, Any] = wait_until(
        lambda: (r := row(services, task_id)) and r["status"] in states and r
    )
    return found


def dispatched(services: Services, dispatch_id: UUID) -> HookDispatch | None:
    try:
        found: Aggregate = services.app.repository.get(dispatch_id)
    except AggregateNotFoundError:
        return None
    return found if isinstance(found, HookDispatch) else None


def running(services: Services, task_id: UUID, record: Path) -> dict[str, Any]:
    """Wait until the agent process has started (it wrote its record line)."""
    wait_until(lambda: record.exists() and record.read_text().strip())
    seen: dict[str, Any] = json.loads(record.read_text().splitlines()[-1])
    return seen


def test_exit_zero_completes_with_the_last_text_and_activity(
    executing: Services, tmp_path: Path
) -> None:
    record = tmp_path / "seen.jsonl"
    lines = [
        "warming up",
        {"type": "assistant", "message": {"content": [{"type": "text", "text": "Done: 3 fixes"}]}},
    ]
    task_id = submit(executing, {"lines": lines, "record": str(record)}, model="sonnet")
    done = ends(executing, task_id, "completed")
    assert (done["outcome"], done["attemptCount"], done["lastError"]) == ("Done: 3 fixes", 1, None)
    kinds = [(r["kind"], r["agent"], r["text"]) for r in done["activity"]]
    assert kinds == [
        ("status", "tachograph", "attempt 1 started"),
        ("text", None, "warming up"),
        ("text", "claude", "Done: 3 fixes"),
        ("status", "tachograph", "exit code 0"),
    ]
    seen = json.loads(record.read_text())
    assert seen["cwd"] == str(executing.settings.workspace_root.resolve())
    env = seen["env"]
    assert env["TACHOGRAPH_TASK_ID"] == str(task_id)
    assert env["TACHOGRAPH_SESSION_ID"] == done["sessionId"]
    assert env["TACHOGRAPH_URL"] == executing.settings.url
    assert "TACHOGRAPH_DATABASE_URL" not in env
    # TaskStart and TaskStop went through the hook gateway with the attempt's turnId.
    for event in ("TaskStart", "TaskStop"):
        dispatch_id = dispatch_id_for(
            UUID(done["sessionId"]), f"{env['TACHOGRAPH_TURN_ID']}:{event}"
        )
        dispatch = wait_until(functools.partial(dispatched, executing, dispatch_id))
        assert isinstance(dispatch, HookDispatch)
        assert (dispatch.event_name, dispatch.turn_id) == (event, env["TACHOGRAPH_TURN_ID"])
        assert str(dispatch.session_id) == done["sessionId"]


def test_argv_template_substitutes_whole_arguments_without_a_shell(
    task_settings: Settings, tmp_path: Path
) -> None:
    (task_settings.workspace_root / "proj").mkdir()
    record = tmp_path / "seen.jsonl"
    template = (
        sys.executable,
        FAKE_AGENT,
        "{prompt}",
        "--model",
        "{model}",
        "{taskId}",
        "{workspace}",
    )
    services = build_services(task_settings.with_(task_command=template))
    services.app.register_workspace("proj", "proj", False, "t")
    services.start()
    try:
        assert services.tasks is not None
        plan = json.dumps({"record": str(record), "lines": ["$(touch pwned) ; `id`"]})
        with_model = services.tasks.service.create("proj", plan, "m-1", 3, "t").aggregate_id
        ends(services, with_model, "completed")
        without = services.tasks.service.create("proj", plan, None, 3, "t").aggregate_id
        ends(services, without, "completed")
    finally:
        services.stop()
    first, second = (json.loads(line) for line in record.read_text().splitlines())
    proj = str((task_settings.workspace_root / "proj").resolve())
    assert first["argv"][1:] == [plan, "--model", "m-1", str(with_model), proj]
    assert second["argv"][1:] == [plan, str(without), proj]  # no model: flag and value left out
    assert first["cwd"] == proj and first["env"]["TACHOGRAPH_WORKSPACE"] == "proj"
    assert not (Path(proj) / "pwned").exists()


def test_nonzero_exit_fails_with_a_classified_error_and_remediation(executing: Services) -> None:
    task_id = submit(executing, {"exit": 1, "stderr": "Error: 429 rate limit exceeded"})
    failed = ends(executing, task_id, "failed")
    assert failed["lastErrorClass"] == "provider"
    assert failed["lastError"] == "exit code 1: Error: 429 rate limit exceeded"
    assert failed["nextAttemptAt"] is None and failed["attemptCount"] == 1  # user: no retry
    assert failed["remediationTaskId"] == str(remediation_id(task_id))
    assert failed["activity"][-1]["kind"] == "error"


def test_self_update_task_retries_a_transient_failure(executing: Services) -> None:
    root = executing.settings.workspace_root  # a self-update cycle needs a clean repository
    (root / "README.md").write_text("# default\n")
    for args in (
        ["init", "-q", "-b", "main"],
        ["add", "-A"],
        ["-c", "user.name=t", "-c", "user.email=t@example.invalid", "commit", "-q", "-m", "1"],
    ):
        subprocess.run(["git", "-C", str(root), *args], check=True)
    task_id = submit(executing, {"exit": 1, "stderr": "overloaded"}, source="self-update")
    queued = wait_until(
        lambda: (
            (r := row(executing, task_id))["attemptCount"] == 1 and r["status"] == "queued" and r
        )
    )
    assert queued["nextAttemptAt"] > queued["updatedAt"]
    assert queued["lastErrorClass"] == "provider"


def test_timeout_terminates_the_process_and_fails_as_timeout(
    task_settings: Settings, tmp_path: Path
) -> None:
    services = build_services(task_settings.with_(task_timeout_s=0.5))
    services.start()
    try:
        record = tmp_path / "seen.jsonl"
        task_id = submit(services, {"sleep": 30, "record": str(record)})
        failed = ends(services, task_id, "failed")
    finally:
        services.stop()
    assert (failed["lastErrorClass"], failed["lastError"]) == ("timeout", "timed out after 0.5 s")
    assert failed["activity"][-1]["error"] == "timed out after 0.5 s; killed by SIGTERM"


def test_cancel_of_an_agent_ignoring_sigterm_ends_after_sigkill_and_reaping(
    executing: Services, tmp_path: Path
) -> None:
    record = tmp_path / "seen.jsonl"
    task_id = submit(executing, {"sleep": 30, "ignore_term": True, "record": str(record)})
    pid_env = running(executing, task_id, record)
    assert pid_env["env"]["TACHOGRAPH_TASK_ID"] == str(task_id)
    assert executing.tasks is not None
    executing.tasks.service.cancel(task_id, "alice")
    assert row(executing, task_id)["status"] in ("cancelling", "cancelled")
    cancelled = ends(executing, task_id, "cancelled")
    assert cancelled["activity"][-1]["error"] == (
        "stopped (cancelled); killed by SIGKILL (after SIGKILL)"
    )
    assert cancelled["remediationTaskId"] is None


def test_cancel_ends_cancelled_even_when_the_agent_exits_zero_on_sigterm(
    executing: Services, tmp_path: Path
) -> None:
    record = tmp_path / "seen.jsonl"
    task_id = submit(executing, {"sleep": 30, "on_term": "bye", "record": str(record)})
    running(executing, task_id, record)
    assert executing.tasks is not None
    executing.tasks.service.cancel(task_id, "alice")
    cancelled = ends(executing, task_id, "cancelled")
    assert cancelled["outcome"] is None
    assert [r["text"] for r in cancelled["activity"] if r["kind"] == "text"] == ["bye"]


def test_shutdown_stops_attempts_and_requeues_or_dead_letters_them(
    task_settings: Settings, tmp_path: Path
) -> None:
    services = build_services(task_settings)
    services.start()
    record = tmp_path / "seen.jsonl"
    again = submit(services, {"sleep": 30, "record": str(record)}, max_attempts=2)
    last = submit(services, {"sleep": 30, "record": str(record)}, max_attempts=1)
    wait_until(lambda: record.exists() and len(record.read_text().splitlines()) == 2)
    services.stop()
    reopened = build_services(task_settings.with_(task_command=None))
    try:
        reopened.runner.catch_up()
        requeued = row(reopened, again)
        assert (requeued["status"], requeued["attemptCount"]) == ("queued", 1)
        assert requeued["lastErrorClass"] == "infrastructure"
        assert row(reopened, last)["status"] == "dead-letter"
    finally:
        reopened.stop()


def test_a_chatty_agent_is_throttled(executing: Services) -> None:
    task_id = submit(executing, {"repeat": 20_000})
    done = ends(executing, task_id, "completed")
    assert done["outcome"] == "line 19999"
    assert len(done["activity"]) == 256
    assert done["activity"][-2]["text"] == "line 19999"
    stored = [
        record
        for event in executing.app.events.get(transcript_id(task_id, 1))
        for record in getattr(event, "records", [])
    ]
    # A few throttled batches of at most 256 records each, not 20,000 writes.
    assert len(stored) < 2_000
    assert any("activity records dropped" in r.get("text", "") for r in stored)


def test_a_missing_executable_fails_as_configuration(task_settings: Settings) -> None:
    services = build_services(task_settings.with_(task_command=("/nonexistent/agent", "{prompt}")))
    services.start()
    try:
        task_id = submit(services, "hello")
        failed = ends(services, task_id, "failed")
    finally:
        services.stop()
    assert failed["lastErrorClass"] == "configuration"
    assert failed["lastError"].startswith("cannot start '/nonexistent/agent'")


def test_concurrency_limits_running_attempts(executing: Services, tmp_path: Path) -> None:
    record = tmp_path / "seen.jsonl"
    ids = [submit(executing, {"sleep": 30, "record": str(record)}) for _ in range(3)]
    wait_until(lambda: record.exists() and len(record.read_text().splitlines()) == 2)
    assert executing.tasks is not None and executing.tasks.executor is not None
    assert executing.tasks.executor.running() == 2
    statuses = sorted(row(executing, i)["status"] for i in ids)
    assert statuses == ["queued", "running", "running"]
    for task_id in ids:
        executing.tasks.service.cancel(task_id, "t")
    for task_id in ids:
        ends(executing, task_id, "cancelled")


def heartbeat(services: Services, worker: str, host: str, pid: int, seen_at: datetime) -> None:
    with services.store.transaction() as cur:
        cur.execute(
            "INSERT INTO task_workers (id, host, pid, seen_at) VALUES (?,?,?,?)",
            (worker, host, pid, iso(seen_at)),
        )


def test_restart_recovery_settles_only_work_of_gone_workers(task_settings: Settings) -> None:
    services = build_services(task_settings.with_(task_command=None))
    try:
        assert services.tasks is not None
        tasks, registry = services.tasks.service, services.tasks.registry
        now = datetime.now(UTC)
        dead_here = f"{registry.host}:999999999:gone"  # same host, process gone
        heartbeat(services, dead_here, registry.host, 999_999_999, now)
        live_remote = "elsewhere:7:live"
        heartbeat(services, live_remote, "elsewhere", 7, now)
        stale_remote = "elsewhere:8:stale"
        heartbeat(services, stale_remote, "elsewhere", 8, now - timedelta(minutes=5))
        plan = {
            "below": (dead_here, 2),
            "exhausted": (dead_here, 1),
            "cancelling": (stale_remote, 3),
            "unknown": ("never-registered", 3),
            "live": (live_remote, 3),
        }
        ids = {}
        for name, (worker, max_attempts) in plan.items():
            ids[name] = submit(services, "x", max_attempts=max_attempts)
            assert tasks.claim(ids[name], worker) is not None
        tasks.cancel(ids["cancelling"], "t")
        services.runner.catch_up()
        assert services.tasks.recover() == 4
        assert {name: row(services, t)["status"] for name, t in ids.items()} == {
            "below": "queued",
            "exhausted": "dead-letter",
            "cancelling": "cancelled",
            "unknown": "queued",
            "live": "running",
        }
        assert services.tasks.recover() == 0
    finally:
        services.stop()


def test_an_unreapable_process_is_reported_interrupted_and_keeps_its_slot(
    task_settings: Settings, tmp_path: Path
) -> None:
    from infra.executor import CommandRunner
    from scheduler.tasks import TaskExecutor

    class Unkillable(CommandRunner):
        """Signals never arrive: the process looks impossible to reap."""

        def signal(self, proc: Any, sig: int) -> None:
            return None

    services = build_services(task_settings)
    assert services.tasks is not None
    runner = Unkillable(timeout_s=30, grace_s=0.1, reap_wait_s=0.2)
    executor = TaskExecutor(
        task_settings, services.app, services.store, services.tasks.service, runner, None, "w-1"
    )
    record = tmp_path / "seen.jsonl"
    try:
        task_id = submit(services, {"sleep": 20, "record": str(record)})
        services.runner.catch_up()
        assert executor.poll() == 1
        running(services, task_id, record)
        services.tasks.service.cancel(task_id, "t")
        interrupted = wait_until(lambda: (r := row(services, task_id))["interrupted"] and r)
        assert interrupted["status"] == "cancelling"  # not durable before reaping
        assert executor.running() == 1  # the slot stays taken
        assert "interrupted" in interrupted["activity"][-1]["text"]
        worker = threading.Thread(target=executor.shutdown)
        worker.start()
        worker.join(10)
        assert not worker.is_alive()
        assert row(services, task_id)["status"] == "cancelling"
    finally:
        for proc in runner.unreaped:
            proc.kill()
            proc.wait()
        services.stop()


pytestmark = pytest.mark.filterwarnings("error")


def test_an_agents_output_is_stored_redacted(executing: Services) -> None:
    secret = "Sup3rS3cretPw"
    call = {"type": "tool_use", "name": "Bash", "input": {"command": f"sshpass -p {secret} ssh h"}}
    lines = [
        f"connecting to postgresql://app:{secret}@db/app",
        {"type": "assistant", "message": {"content": [call]}},
        {
            "type": "assistant",
            "message": {"content": [{"type": "text", "text": f"done; password={secret}"}]},
        },
    ]
    task_id = submit(executing, {"lines": lines})
    done = ends(executing, task_id, "completed")
    assert done["outcome"] == "done; password=[redacted]"
    stored = [
        record
        for event in executing.app.events.get(transcript_id(task_id, 1))
        for record in getattr(event, "records", [])
    ]
    title = executing.app.get_session(UUID(done["sessionId"])).title
    assert title is not None and title.startswith("Task: ") and secret not in title
    shown = json.dumps([done["activity"], stored, title])
    assert "postgresql://app:[redacted]@db/app" in shown and "sshpass -p [redacted]" in shown
    assert secret not in shown
