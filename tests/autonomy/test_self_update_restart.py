"""A `serve` killed in the middle of each phase of a cycle: the next process recovers the
attempt and the cycle runs again from prepare; a ref is imported once, from the new
attempt, and a ref a killed import left behind (never recorded) is removed first.

The git phases are caught by a `git` on serve's PATH that pauses once at the command
that phase runs (clone for prepare, merge-base for inspect), or, for commit, right
after `update-ref` created the ref and before the phase could be recorded."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from bootstrap import build_services
from domain.task_policy import SOURCE_SELF_UPDATE
from infra.settings import Settings
from projections.self_update_cycles import task_workflow
from tests.autonomy.record_collector import collector_port
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


# Git runs with an environment of Tachograph's own, so the wrapper carries its settings.
PAUSING_GIT = """#!/bin/sh
# Pauses once, at the first git command whose arguments include {at}.
case " $* " in
  *" {at} "*)
    if [ ! -e {mark} ]; then
      if [ {after} = 1 ]; then {real} "$@"; code=$?; else code=; fi
      touch {mark}
      sleep 20
      [ -n "$code" ] && exit "$code"
    fi ;;
esac
exec {real} "$@"
"""
GIT_PAUSES = {
    "prepare": ("clone", "0"),
    "inspect": ("merge-base", "0"),
    "commit": ("update-ref", "1"),
}


def pausing_git(tmp_path: Path, phase: str) -> dict[str, str]:
    """serve's environment with a `git` first on PATH that pauses in this phase."""
    if phase not in GIT_PAUSES:
        return {}
    at, after = GIT_PAUSES[phase]
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    wrapper = bin_dir / "git"
    real = shutil.which("git")
    assert real is not None
    mark = shlex.quote(str(tmp_path / "git-paused"))
    wrapper.write_text(PAUSING_GIT.format(at=at, after=after, real=shlex.quote(real), mark=mark))
    wrapper.chmod(0o755)
    return {"PATH": f"{bin_dir}:{os.environ['PATH']}"}


@pytest.mark.parametrize("phase", ["prepare", "implement", "inspect", "review", "commit"])
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
    script["collector"] = collector_port()  # the jail hides tmp_path from the agent
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

    env = {
        **ENV,
        **pausing_git(tmp_path, phase),
        "TACHOGRAPH_SELF_UPDATE_FORWARD": str(collector_port()),
    }
    ref = f"refs/tachograph/self-update/{task_id}"
    first = Server(settings, tmp_path / "serve-1.log", env)
    first.wait_ready()
    try:
        if phase == "implement":
            until(lambda: Path(script["record"] + ".slept").exists())
        elif phase == "review":
            until(lambda: awaiting(first, task_id, 1))
        else:
            if phase == "commit":
                approve(first, task_id, attempt=1)
            until(lambda: (tmp_path / "git-paused").exists())
    finally:
        first.kill()  # SIGKILL in the middle of the phase
    left = git(repo, "for-each-ref", "--format=%(objectname)", "refs/tachograph").split()
    # Only a kill after update-ref leaves a ref, and no commit phase says it landed.
    assert len(left) == (1 if phase == "commit" else 0)
    if phase == "commit":
        flow = workflow_from_store(settings, task_id)
        assert [p["phase"] for p in flow["phases"]][-1] == "review" and flow["commit"] is None

    second = Server(settings, tmp_path / "serve-2.log", env)
    second.wait_ready()
    try:
        approve(second, task_id, attempt=2)
        task = until(
            lambda: (
                (t := httpx.get(f"{second.url}/api/tasks/{task_id}", timeout=5).json())["status"]
                == "completed"
                and t
            )
        )
        found = workflow(second, task_id)
        assert found is not None
        flow = found
    finally:
        second.signal(signal.SIGTERM)
        second.wait(30)
    assert task["attemptCount"] == 2 and task["outcome"].startswith("imported ")
    attempts = [(p["attempt"], p["phase"], p["status"]) for p in flow["phases"]]
    # prepare is recorded once the clone exists: killed while cloning, attempt 1 has none.
    first_recorded = 2 if phase == "prepare" else 1
    assert attempts[0][:2] == (first_recorded, "prepare") and (2, "prepare", "ok") in attempts
    assert attempts[-1] == (2, "commit", "ok")
    assert [a for a in attempts if a[1] == "commit"] == [(2, "commit", "ok")]
    refs = git(repo, "for-each-ref", "--format=%(refname) %(objectname)", "refs/tachograph")
    assert refs.split() == [ref, flow["commit"]]
    assert git(repo, "status", "--porcelain") == ""
    if phase == "commit":  # the ref the killed import left was not the one that landed
        assert left != [flow["commit"]]
        assert "no commit phase recorded it" in second.output()


def approve(server: Server, task_id: str, attempt: int) -> None:
    """As the operator: approve the digest this attempt's inspect phase shows."""
    digest = until(lambda: awaiting(server, task_id, attempt))
    reviewed = httpx.post(
        f"{server.url}/api/tasks/{task_id}/review",
        json={"digest": digest, "approve": True},
        timeout=10,
    )
    assert reviewed.status_code == 200, reviewed.text


def workflow_from_store(settings: Settings, task_id: str) -> dict[str, Any]:
    """The workflow as recorded, read while no server runs."""
    services = build_services(settings)
    try:
        services.runner.catch_up()
        flow = task_workflow(services.store, task_id)
    finally:
        services.close()
    assert flow is not None
    return flow
