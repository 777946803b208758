"""Self-update cycles in a contained clone, through the real executor (both stores).

A stand-in agent scripted by the task's prompt works in the clone; the workflow route
shows the phases; the registered checkout only ever gains a ref.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from domain.task_policy import SOURCE_SELF_UPDATE
from infra.settings import Settings
from tests.autonomy.record_collector import collector_port

AGENT = str(Path(__file__).with_name("self_update_agent.py"))
TERMINAL = {"completed", "failed", "dead-letter", "cancelled"}


def git(repo: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-C", str(repo), *args], capture_output=True, text=True, check=True
    )
    return done.stdout


@pytest.fixture
def repo(settings: Settings) -> Path:
    path = settings.workspace_root / "repo"
    path.mkdir()
    git(path, "init", "-q", "-b", "main")
    git(path, "config", "user.email", "dev@example.invalid")
    git(path, "config", "user.name", "Dev")
    (path / "README.md").write_text("# repo\n")
    (path / ".gitignore").write_text("*.log\n")
    git(path, "add", "-A")
    git(path, "commit", "-q", "-m", "first")
    git(path, "remote", "add", "origin", "/nowhere/origin.git")
    return path


@contextmanager
def cycle_client(settings: Settings, **extra: Any) -> Iterator[TestClient]:
    """The app with the stand-in agent as its executor and the repository registered;
    its notes and the script its reviewing run needs (kept in a state directory of the
    test's) pass through the collector's port, relayed into the jail, which hides both."""
    state = settings.data_dir.parent / "agent-state"
    port = collector_port()
    configured = settings.with_(
        task_command=(sys.executable, AGENT, "{prompt}", str(state), "--collector", str(port)),
        self_update_forward=(port,),
        task_poll_interval_s=0.05,
        task_kill_grace_s=0.3,
        task_timeout_s=60.0,
        **extra,
    )
    with TestClient(create_app(configured), raise_server_exceptions=False) as client:
        made = client.post("/api/workspaces", json={"id": "repo", "path": "repo"})
        assert made.status_code == 201
        yield client


@pytest.fixture
def api(settings: Settings, repo: Path) -> Iterator[TestClient]:
    with cycle_client(settings) as client:
        yield client


def snapshot(repo: Path) -> dict[str, Any]:
    """What the operator sees of the checkout: files, index, HEAD, branches, status."""
    files = {
        str(p.relative_to(repo)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(repo.rglob("*"))
        if p.is_file() and ".git" not in p.relative_to(repo).parts
    }
    git_dir = repo / ".git"
    return {
        "files": files,
        "head": (git_dir / "HEAD").read_text(),
        "index": hashlib.sha256((git_dir / "index").read_bytes()).hexdigest(),
        "branches": git(repo, "for-each-ref", "refs/heads", "refs/remotes"),
        "status": git(repo, "status", "--porcelain=v1", "--untracked-files=all"),
        "config": (git_dir / "config").read_text(),
    }


def cycle(api: TestClient, tmp_path: Path, **script: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """Run one self-update task with this script; its final row and its workflow."""
    services = api.app.state.services  # type: ignore[attr-defined]
    record = tmp_path / "agent.jsonl"
    prompt = json.dumps({**script, "record": str(record), "collector": collector_port()})
    recorded = services.tasks.service.create(
        "repo", prompt, None, 1, "test", source=SOURCE_SELF_UPDATE
    )
    task_id = str(recorded.aggregate_id)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        head = services.app.recorder.max_notification_id()
        task = api.get(f"/api/tasks/{task_id}?minPosition={head}").json()
        if task["status"] in TERMINAL:
            break
        time.sleep(0.1)
    assert task["status"] in TERMINAL, task
    flow = api.get(f"/api/tasks/{task_id}/workflow")
    assert flow.status_code == 200, flow.text
    return task, flow.json()


def phases(flow: dict[str, Any]) -> list[tuple[str, str]]:
    return [(p["phase"], p["status"]) for p in flow["phases"]]


def seen(tmp_path: Path) -> list[dict[str, Any]]:
    path = tmp_path / "agent.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_a_dirty_checkout_is_a_no_op_saying_why(
    api: TestClient, repo: Path, tmp_path: Path
) -> None:
    (repo / "README.md").write_text("# edited by the operator\n")
    before = snapshot(repo)
    task, flow = cycle(api, tmp_path, implement="commit", review="approve")
    assert task["status"] == "completed" and task["outcome"].startswith("no-op:")
    assert "README.md" in task["outcome"]
    assert phases(flow) == [("prepare", "noop")]
    assert seen(tmp_path) == []  # the agent never ran
    assert snapshot(repo) == before


def test_a_good_change_lands_as_a_ref_and_nothing_else_moves(
    api: TestClient, repo: Path, tmp_path: Path
) -> None:
    before = snapshot(repo)
    head = git(repo, "rev-parse", "HEAD").strip()
    task, flow = cycle(api, tmp_path, implement="commit", review="approve")
    assert task["status"] == "completed", task
    assert phases(flow) == [
        ("prepare", "ok"),
        ("implement", "ok"),
        ("inspect", "ok"),
        ("review", "ok"),
        ("commit", "ok"),
    ]
    prepared = flow["phases"][0]["evidence"]
    assert prepared["head"] == head and prepared["branch"] == "main"
    inspected = flow["phases"][2]["evidence"]
    assert inspected["files"] and "CHANGELOG.md" in json.dumps(inspected["files"])
    assert "+- tidy the docs" in inspected["patch"]
    digest = inspected["digest"]
    assert flow["phases"][3]["evidence"]["digest"] == digest
    ref = f"refs/tachograph/self-update/{task['id']}"
    assert flow["ref"] == ref and task["outcome"] == f"imported {flow['commit'][:12]} as {ref}"
    assert git(repo, "rev-parse", ref).strip() == flow["commit"]
    assert git(repo, "merge-base", "--is-ancestor", head, ref) == ""
    assert snapshot(repo) == before  # working tree, index, HEAD, branches, config
    implement, review = seen(tmp_path)
    assert Path(implement["cwd"]) != repo and implement["remotes"] == []
    assert implement["branch"] == f"tachograph/self-update/{task['id']}"
    assert implement["home"] != str(Path.home())
    assert "TACHOGRAPH_API_KEY" not in implement["env"]
    assert "TACHOGRAPH_DATABASE_URL" not in implement["env"]
    assert review["digest"] == digest

    discarded = api.post(f"/api/tasks/{task['id']}/discard", json={"reason": "not now"})
    assert discarded.status_code == 200, discarded.text
    assert discarded.json()["discardedAt"] is not None
    refs = git(repo, "for-each-ref", "refs/tachograph")
    assert refs == ""
    again = api.post(f"/api/tasks/{task['id']}/discard")
    assert again.status_code == 409
    assert snapshot(repo) == before


def test_review_rejection_imports_nothing(api: TestClient, repo: Path, tmp_path: Path) -> None:
    task, flow = cycle(api, tmp_path, implement="commit", review="reject")
    assert phases(flow)[-1] == ("review", "rejected")
    assert task["status"] == "completed" and "nothing was imported" in task["outcome"]
    assert git(repo, "for-each-ref", "refs/tachograph") == ""


def test_a_wrong_digest_is_a_rejection(api: TestClient, repo: Path, tmp_path: Path) -> None:
    _, flow = cycle(api, tmp_path, implement="commit", review="wrong-digest")
    assert phases(flow)[-1] == ("review", "rejected")
    assert git(repo, "for-each-ref", "refs/tachograph") == ""


def test_the_reviewer_cannot_change_the_clone_it_approves(
    api: TestClient, repo: Path, tmp_path: Path
) -> None:
    # The reviewer amends the commit at the path the implementer worked in: that is its
    # own checkout by then, while the clone waits out of its reach. A change after
    # review would still be refused by the commit phase's digest check
    # (tests/autonomy/test_self_update_git.py).
    task, flow = cycle(api, tmp_path, implement="commit", review="tamper")
    assert phases(flow)[-1] == ("commit", "ok") and task["status"] == "completed"
    ref = f"refs/tachograph/self-update/{task['id']}"
    assert git(repo, "show", f"{ref}:CHANGELOG.md") == "- tidy the docs\n"
    assert flow["commit"] == git(repo, "rev-parse", ref).strip()


def test_remotes_changed_during_the_cycle_are_refused(
    settings: Settings, repo: Path, tmp_path: Path
) -> None:
    # The stand-in plays the operator who adds a remote mid-cycle; in the jail it could
    # not reach the checkout at all, so this one runs without it.
    with cycle_client(settings, self_update_sandbox="none") as api:
        task, flow = cycle(
            api, tmp_path, implement="remote-change", review="approve", checkout=str(repo)
        )
    assert flow["phases"][0]["evidence"]["sandbox"] == "none"
    assert phases(flow)[-1] == ("commit", "failed")
    assert "remote" in flow["phases"][-1]["evidence"]["reason"]
    assert git(repo, "for-each-ref", "refs/tachograph") == ""


def test_no_change_and_leftovers(api: TestClient, repo: Path, tmp_path: Path) -> None:
    task, flow = cycle(api, tmp_path, implement="noop", review="approve")
    assert phases(flow) == [("prepare", "ok"), ("implement", "ok"), ("inspect", "noop")]
    assert task["status"] == "completed" and "Nothing needed changing" in task["outcome"]
    (tmp_path / "agent.jsonl").unlink()
    task, flow = cycle(api, tmp_path, implement="dirty", review="approve")
    assert phases(flow)[-1] == ("inspect", "failed")
    assert task["status"] == "failed" and task["lastErrorClass"] == "validation"
    assert git(repo, "for-each-ref", "refs/tachograph") == ""


def test_a_task_without_a_cycle_has_no_workflow(api: TestClient) -> None:
    made = api.post("/api/tasks", json={"workspaceId": "default", "prompt": "x"}).json()
    missing = api.get(f"/api/tasks/{made['id']}/workflow")
    assert missing.status_code == 404 and missing.json()["error"] == "not_found"


@pytest.fixture
def operator_api(settings: Settings, repo: Path) -> Iterator[TestClient]:
    with cycle_client(
        settings, self_update_review="operator", self_update_review_timeout_s=30.0
    ) as client:
        yield client


def awaiting_review(api: TestClient, tmp_path: Path) -> tuple[str, str]:
    """Start a cycle whose agent commits; return its task and the digest awaiting review."""
    script = {"implement": "commit", "review": "approve", "record": str(tmp_path / "a")}
    task_id, inspected = inspected_cycle(api, json.dumps({**script, "collector": collector_port()}))
    return task_id, str(inspected["digest"])


def inspected_cycle(api: TestClient, prompt: str) -> tuple[str, dict[str, Any]]:
    """Start a cycle with this prompt; return its task and the inspect phase's evidence
    once it awaits an operator's review."""
    services = api.app.state.services  # type: ignore[attr-defined]
    task_id = str(
        services.tasks.service.create(
            "repo", prompt, None, 1, "t", source=SOURCE_SELF_UPDATE
        ).aggregate_id
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        head = services.app.recorder.max_notification_id()
        flow = api.get(f"/api/tasks/{task_id}/workflow?minPosition={head}")
        if flow.status_code == 200 and phases(flow.json())[-1:] == [("inspect", "ok")]:
            return task_id, dict(flow.json()["phases"][-1]["evidence"])
        time.sleep(0.1)
    raise AssertionError("the cycle never reached review")


def finished(api: TestClient, task_id: str) -> dict[str, Any]:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        task: dict[str, Any] = api.get(f"/api/tasks/{task_id}").json()
        if task["status"] in TERMINAL:
            return task
        time.sleep(0.1)
    raise AssertionError(f"task {task_id} did not finish")


def test_an_operator_approves_the_reviewed_digest(
    operator_api: TestClient, repo: Path, tmp_path: Path
) -> None:
    task_id, digest = awaiting_review(operator_api, tmp_path)
    assert git(repo, "for-each-ref", "refs/tachograph") == ""  # nothing before the review
    reviewed = operator_api.post(
        f"/api/tasks/{task_id}/review", json={"digest": digest, "approve": True, "reason": "ok"}
    )
    assert reviewed.status_code == 200, reviewed.text
    again = operator_api.post(
        f"/api/tasks/{task_id}/review", json={"digest": digest, "approve": True}
    )
    assert again.status_code == 409
    task = finished(operator_api, task_id)
    assert task["status"] == "completed" and task["outcome"].startswith("imported ")
    flow = operator_api.get(f"/api/tasks/{task_id}/workflow").json()
    review = flow["phases"][-2]
    assert (review["phase"], review["status"]) == ("review", "ok")
    assert review["evidence"]["by"] == "operator" and review["evidence"]["actor"] == "anonymous"
    assert (
        git(repo, "rev-parse", f"refs/tachograph/self-update/{task_id}").strip() == flow["commit"]
    )


def test_an_operator_approving_another_digest_rejects(
    operator_api: TestClient, repo: Path, tmp_path: Path
) -> None:
    task_id, _ = awaiting_review(operator_api, tmp_path)
    wrong = {"digest": "sha256:" + "0" * 64, "approve": True}
    assert operator_api.post(f"/api/tasks/{task_id}/review", json=wrong).status_code == 200
    task = finished(operator_api, task_id)
    assert "nothing was imported" in task["outcome"]
    flow = operator_api.get(f"/api/tasks/{task_id}/workflow").json()
    assert phases(flow)[-1] == ("review", "rejected")
    assert git(repo, "for-each-ref", "refs/tachograph") == ""


def test_a_review_nobody_awaits_is_refused(api: TestClient, tmp_path: Path) -> None:
    task, _ = cycle(api, tmp_path, implement="commit", review="approve")
    refused = api.post(f"/api/tasks/{task['id']}/review", json={"digest": "x", "approve": True})
    assert refused.status_code == 409 and refused.json()["error"] == "invalid_state"
    bad = api.post(f"/api/tasks/{task['id']}/review", json={"digest": "x", "approve": "yes"})
    assert bad.status_code == 422
