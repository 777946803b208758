"""A `serve` killed in the middle of a cycle: the next process recovers the attempt and
the cycle runs again from prepare; a ref is imported once, from the new attempt."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from api.bootstrap import build_services
from domain.task_policy import SOURCE_SELF_UPDATE
from infra.settings import Settings
from tests.support import Server

pytestmark = pytest.mark.slow

AGENT = str(Path(__file__).with_name("self_update_agent.py"))
ENV = {
    "TACHOGRAPH_TASK_COMMAND": json.dumps([sys.executable, AGENT, "{prompt}"]),
    "TACHOGRAPH_TASK_POLL_S": "0.2",
    "TACHOGRAPH_TASK_KILL_GRACE_S": "1",
    "TACHOGRAPH_SELF_UPDATE_REVIEW": "operator",
}


def git(repo: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-C", str(repo), *args], capture_output=True, text=True, check=True
    )
    return done.stdout


def until(check: Any, timeout: float = 60) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.2)
    raise AssertionError("condition not met in time")


def workflow(server: Server, task_id: str) -> dict[str, Any] | None:
    answer = httpx.get(f"{server.url}/api/tasks/{task_id}/workflow", timeout=5)
    return answer.json() if answer.status_code == 200 else None


def awaiting(server: Server, task_id: str, attempt: int) -> str | None:
    flow = workflow(server, task_id)
    if flow is None:
        return None
    last = flow["phases"][-1]
    if (last["attempt"], last["phase"], last["status"]) == (attempt, "inspect", "ok"):
        return str(last["evidence"]["digest"])
    return None


@pytest.mark.parametrize("phase", ["implement", "review"])
def test_a_killed_cycle_is_recovered_and_imports_once(
    settings: Settings, tmp_path: Path, phase: str
) -> None:
    repo = settings.workspace_root / "repo"
    repo.mkdir()
    (repo / "README.md").write_text("# repo\n")
    for args in (["init", "-q", "-b", "main"], ["add", "-A"]):
        git(repo, *args)
    git(repo, "-c", "user.name=t", "-c", "user.email=t@example.invalid", "commit", "-qm", "1")
    script: dict[str, Any] = {"implement": "commit", "review": "approve"}
    script["record"] = str(tmp_path / "agent.jsonl")
    if phase == "implement":
        script["sleep_first"] = 60
    setup = build_services(settings)
    try:
        setup.app.register_workspace("repo", "repo", False, "test")
        assert setup.tasks is not None
        task_id = str(
            setup.tasks.service.create(
                "repo", json.dumps(script), None, 3, "t", source=SOURCE_SELF_UPDATE
            ).aggregate_id
        )
    finally:
        setup.close()

    first = Server(settings, tmp_path / "serve-1.log", ENV)
    first.wait_ready()
    try:
        if phase == "implement":
            until(lambda: Path(script["record"] + ".slept").exists())
        else:
            until(lambda: awaiting(first, task_id, 1))
    finally:
        first.kill()  # SIGKILL in the middle of the phase
    assert git(repo, "for-each-ref", "refs/tachograph") == ""

    second = Server(settings, tmp_path / "serve-2.log", ENV)
    second.wait_ready()
    try:
        digest = until(lambda: awaiting(second, task_id, 2))
        reviewed = httpx.post(
            f"{second.url}/api/tasks/{task_id}/review",
            json={"digest": digest, "approve": True},
            timeout=10,
        )
        assert reviewed.status_code == 200, reviewed.text
        task = until(
            lambda: (
                (t := httpx.get(f"{second.url}/api/tasks/{task_id}", timeout=5).json())["status"]
                == "completed"
                and t
            )
        )
        flow = workflow(second, task_id)
        assert flow is not None
    finally:
        second.signal(signal.SIGTERM)
        second.wait(30)
    assert task["attemptCount"] == 2 and task["outcome"].startswith("imported ")
    attempts = [(p["attempt"], p["phase"], p["status"]) for p in flow["phases"]]
    assert attempts[0][:2] == (1, "prepare") and (2, "prepare", "ok") in attempts
    assert attempts[-1] == (2, "commit", "ok")
    assert [a for a in attempts if a[1] == "commit"] == [(2, "commit", "ok")]
    refs = git(repo, "for-each-ref", "--format=%(refname) %(objectname)", "refs/tachograph")
    assert refs.split() == [f"refs/tachograph/self-update/{task_id}", flow["commit"]]
    assert git(repo, "status", "--porcelain") == ""
