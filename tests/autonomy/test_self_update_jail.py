"""A cycle's agent in its jail, through the real executor (both stores).

The stand-in agent's own process (not a reported tool call) tries what a hostile agent
would from inside a cycle; the prepare phase says what the jail isolates, as its probe
saw it; `strict` fails the cycle when the jail is incomplete (here: no bwrap on PATH).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from domain.task_policy import SOURCE_SELF_UPDATE
from infra.jail import ITEMS
from infra.settings import Settings
from tests.autonomy.record_collector import collector_port
from tests.autonomy.test_self_update_cycle import (  # noqa: F401 (the repo fixture)
    cycle,
    cycle_client,
    git,
    phases,
    repo,
    seen,
    snapshot,
)
from tests.jail import outside


def covering_tmpfs(path: Path) -> str:
    """The tmpfs the jail mounts over `path`: /tmp's when it lies there, else its own."""
    return "/tmp" if path.is_relative_to("/tmp") else str(path)


@pytest.fixture
def bystander() -> Iterator[subprocess.Popen[bytes]]:
    with outside.bystander() as proc:
        yield proc


@pytest.fixture
def unrelayed_port() -> Iterator[int]:
    with outside.unrelayed_port() as port:
        yield port


def test_the_agent_in_its_jail_reaches_nothing_outside_and_the_ref_still_lands(
    settings: Settings,
    repo: Path,  # noqa: F811
    tmp_path: Path,
    bystander: subprocess.Popen[bytes],
    unrelayed_port: int,
) -> None:
    """As whoever runs the tests (root in CI): the server's and a bystander's environment,
    the checkout through /proc, the host's network namespace, the tmpfs over the data
    directory, a signal outside, loopback ports not relayed, PostgreSQL by TCP and by its
    socket, the store, the checkout: all refused. The notes reach the test through the
    relayed collector port, so a relayed port works."""
    for tool in ("nsenter", "umount"):
        assert shutil.which(tool), f"{tool} is needed to try the attack"
    store = settings.sqlite_path if settings.database_url is None else None
    with cycle_client(settings, self_update_sandbox="strict") as api:
        before = snapshot(repo)
        task, flow = cycle(
            api,
            tmp_path,
            implement="escape",
            review="approve",
            checkout=str(repo),
            store=str(store or settings.readmodel_sqlite_path),
            outside_pid=str(bystander.pid),
            server_pid=str(os.getpid()),  # the executor runs in this process
            unmount=covering_tmpfs(settings.data_dir.resolve()),
            unrelayed_port=str(unrelayed_port),
        )
    prepared = flow["phases"][0]["evidence"]
    assert prepared["sandbox"] == "strict" and prepared["jail"] == "bubblewrap", prepared
    assert prepared["isolation"] == {item: True for item in ITEMS}, prepared
    assert prepared["isolationMissing"] == {}
    hidden, data = prepared["hidden"], str(settings.data_dir.resolve())
    assert {"/run", "/tmp", "/var/tmp"} <= set(hidden)
    assert any(data == h or data.startswith(h + "/") for h in hidden), hidden
    probes = next(s["probes"] for s in seen(tmp_path) if s["phase"] == "escape")
    assert probes.pop("interfaces") == "lo"
    # Next to the clone is the attempt's own directory, removed when the attempt ends.
    assert probes.pop("writeNextToClone") == "reached"
    refused = {k: v for k, v in probes.items() if v.startswith("refused")}
    assert refused == probes, probes
    assert len(probes) == 14
    assert bystander.poll() is None  # the signal never reached it
    assert snapshot(repo) == before
    assert task["status"] == "completed", task
    assert phases(flow)[-1] == ("commit", "ok")
    assert git(repo, "rev-parse", flow["ref"]).strip() == flow["commit"]


@pytest.fixture
def path_without_bwrap(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A PATH with git and nothing else: bubblewrap is not there."""
    bin_dir = tmp_path / "bin-without-bwrap"
    bin_dir.mkdir()
    real = shutil.which("git")
    assert real is not None
    (bin_dir / "git").symlink_to(real)
    monkeypatch.setenv("PATH", str(bin_dir))


@pytest.mark.usefixtures("path_without_bwrap")
def test_strict_fails_the_cycle_when_the_jail_is_incomplete(
    settings: Settings,
    repo: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    with cycle_client(settings, self_update_sandbox="strict") as api:
        task, flow = cycle(api, tmp_path, implement="commit", review="approve")
    assert phases(flow) == [("prepare", "failed")]
    prepared = flow["phases"][0]["evidence"]
    assert prepared["jail"] == "none"
    assert prepared["isolation"] == {item: False for item in ITEMS}
    assert set(prepared["isolationMissing"]) == set(ITEMS)
    assert "bwrap (bubblewrap) is not on PATH" in prepared["reason"]
    # An infrastructure failure, retried while attempts are left: this task has one.
    assert task["status"] == "dead-letter" and task["lastErrorClass"] == "infrastructure"
    assert "jail is incomplete" in task["lastError"]
    assert seen(tmp_path) == []  # the agent never ran
    assert git(repo, "for-each-ref", "refs/tachograph") == ""


@pytest.mark.parametrize(
    ("mode", "why"),
    [
        ("auto", "bwrap (bubblewrap) is not on PATH"),
        ("none", "TACHOGRAPH_SELF_UPDATE_SANDBOX=none"),
    ],
)
def test_auto_and_none_record_what_is_missing_and_run_with_what_there_is(
    settings: Settings,
    repo: Path,  # noqa: F811
    tmp_path: Path,
    request: pytest.FixtureRequest,
    mode: str,
    why: str,
) -> None:
    if mode == "auto":
        request.getfixturevalue("path_without_bwrap")
    with cycle_client(settings, self_update_sandbox=mode) as api:
        task, flow = cycle(api, tmp_path, implement="commit", review="approve")
    prepared = flow["phases"][0]["evidence"]
    assert prepared["sandbox"] == mode and prepared["jail"] == "none"
    assert prepared["isolation"] == {item: False for item in ITEMS}
    assert prepared["isolationMissing"] == {item: why for item in ITEMS}
    assert task["status"] == "completed" and phases(flow)[-1] == ("commit", "ok")


def lingering(seconds: str) -> list[int]:
    """Processes on the host running `sleep <seconds>`."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and (entry / "cmdline").read_bytes() == (
                b"sleep\0" + seconds.encode() + b"\0"
            ):
                found.append(int(entry.name))
        except OSError:
            continue  # gone meanwhile
    return found


def test_a_stopped_agent_takes_the_children_it_detached_with_it(
    settings: Settings,
    repo: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    """An agent's child in a session of its own is out of reach of the executor's
    process-group signal; the jail's PID namespace ends with the run all the same."""
    seconds = f"{3000 + os.getpid() % 1000}.25"  # names this test's child on the host
    with cycle_client(settings, self_update_sandbox="strict") as api:
        services = api.app.state.services  # type: ignore[attr-defined]
        script = {"implement": "linger", "review": "approve", "linger": seconds}
        script.update(record=str(tmp_path / "agent.jsonl"), collector=str(collector_port()))
        task_id = str(
            services.tasks.service.create(
                "repo", json.dumps(script), None, 1, "test", source=SOURCE_SELF_UPDATE
            ).aggregate_id
        )
        until(lambda: any(s["phase"] == "lingering" for s in seen(tmp_path)))
        assert lingering(seconds), "the detached child should be running"
        assert api.post(f"/api/tasks/{task_id}/cancel").status_code == 200
        until(lambda: api.get(f"/api/tasks/{task_id}").json()["status"] == "cancelled")
    try:
        until(lambda: not lingering(seconds), seconds=5)
    finally:
        for pid in lingering(seconds):  # this test's own child, should it have survived
            os.kill(pid, signal.SIGKILL)


def until(check: Callable[[], object], seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)
