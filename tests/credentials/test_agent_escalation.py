"""The escalation of the credentials issue, replayed through the real executor of `serve`.

A stand-in agent reads its own environment and, with every credential it finds there,
tries to switch autonomy on, revert a revision, delete a session, resolve its own task
and mint itself a key. Nothing of that may work, and no operator or admin credential
may be in its environment at all.
"""

from __future__ import annotations

import json
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from infra.settings import Settings
from tests.support import Proc, env_for, free_port

pytestmark = pytest.mark.slow

ADMIN_KEY = "escalation-test-admin-key"
ADMIN = {"x-tachograph-key": ADMIN_KEY}
AGENT = str(Path(__file__).with_name("escalating_agent.py"))


class Serve:
    def __init__(self, settings: Settings, log: Path) -> None:
        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        env = {
            **env_for(settings.with_(api_key=ADMIN_KEY)),
            "TACHOGRAPH_URL": self.url,
            "TACHOGRAPH_TASK_COMMAND": json.dumps([sys.executable, AGENT, "{prompt}"]),
            "TACHOGRAPH_TASK_POLL_S": "0.2",
            "TACHOGRAPH_REFLECTION_INTERVAL_S": "0.2",
            # A careless operator copied the admin key into another variable too.
            "SOME_VENDOR_TOKEN": ADMIN_KEY,
        }
        self.proc = Proc(["serve", "--port", str(port)], env, log)
        self.http = httpx.Client(base_url=self.url, headers=ADMIN, timeout=10)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            assert self.proc.popen.poll() is None, self.proc.output()
            try:
                if self.http.get("/api/health").status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise AssertionError(f"serve not ready:\n{self.proc.output()}")

    def stop(self) -> None:
        self.http.close()
        if self.proc.popen.poll() is None:
            self.proc.signal(signal.SIGTERM)  # a clean stop writes its last checkpoint
            self.proc.wait(30)


@pytest.fixture
def serve(settings: Settings, tmp_path: Path) -> Iterator[Serve]:
    server = Serve(settings, tmp_path / "serve.log")
    try:
        yield server
    finally:
        server.stop()


def wait_for_task(http: httpx.Client, task_id: str, timeout: float = 60) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        task: dict[str, Any] = http.get(f"/api/tasks/{task_id}").json()
        if task["status"] in ("completed", "failed", "dead-letter", "cancelled"):
            return task
        time.sleep(0.2)
    raise AssertionError(f"task {task_id} did not finish: {task}")


def learned_revision(http: httpx.Client) -> str:
    """One overlay revision learned by the real signal worker, evolution off again after."""
    assert http.patch("/api/settings/autonomy", json={"evolution": True}).status_code == 200
    signal = {"agentId": "claude", "traceId": "t1", "kind": "failure", "goal": "fix the build"}
    assert (
        http.post("/api/autonomy/signals", json={**signal, "failure": "flaky"}).status_code == 201
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        items = http.get("/api/autonomy/revisions").json()["items"]
        if items:
            assert (
                http.patch("/api/settings/autonomy", json={"evolution": False}).status_code == 200
            )
            return str(items[0]["id"])
        time.sleep(0.2)
    raise AssertionError("the signal worker learned nothing")


def test_a_task_agent_cannot_govern_tachograph(serve: Serve, settings: Settings) -> None:
    http = serve.http
    victim = http.post("/api/sessions", json={"workspaceId": "default"}).json()["id"]
    revision = learned_revision(http)
    prompt = json.dumps({"revision": revision, "victim": victim})
    task = http.post("/api/tasks", json={"workspaceId": "default", "prompt": prompt}).json()
    finished = wait_for_task(http, task["id"])
    assert finished["status"] == "failed"  # the agent exits 1; nobody resolved it

    workspace = settings.workspace_root
    env = json.loads((workspace / "agent-env.json").read_text())
    assert "TACHOGRAPH_API_KEY" not in env
    assert ADMIN_KEY not in env.values()
    assert not any(ADMIN_KEY in value for value in env.values())
    token = env["TACHOGRAPH_AGENT_TOKEN"]
    assert token.startswith("tgk_")

    results = json.loads((workspace / "agent-results.json").read_text())
    assert set(results) == {"TACHOGRAPH_AGENT_TOKEN"}  # no other credential to try
    tried = results["TACHOGRAPH_AGENT_TOKEN"]
    assert tried.pop("own_hook") == 200  # it can report on its own session
    assert tried == {
        "other_hook": 403,
        "autonomy": 403,
        "revert": 403,
        "delete_session": 403,
        "resolve_own_task": 403,
        "issue_key": 403,
        "read_sessions": 403,
    }

    # Nothing it tried changed anything.
    settings_now = http.get("/api/settings/autonomy").json()
    assert (settings_now["evolution"], settings_now["selfUpdate"]) == (False, False)
    assert http.get(f"/api/sessions/{victim}").status_code == 200
    revision_now = http.get(f"/api/autonomy/revisions/{revision}").json()
    assert revision_now["revertedByRevisionId"] is None
    assert http.get(f"/api/tasks/{task['id']}").json()["resolution"] is None

    # Its token died with the attempt.
    after = httpx.post(
        f"{serve.url}/api/sessions/{finished['sessionId']}/events",
        json={"event": "PreToolUse"},
        headers={"x-tachograph-key": token},
    )
    assert after.status_code == 401 and after.json()["reason"] == "revoked"
    keys = {k["label"]: k for k in http.get("/api/keys").json()["items"]}
    own = keys[f"task-{task['id']}-1"]
    assert (own["role"], own["taskId"], own["issuedBy"]) == ("agent", task["id"], "system")
    assert own["revokedAt"] is not None and own["expiresAt"] is not None

    # The hook it was allowed to send names the task as its actor.
    dispatches = http.get("/api/events?type=HookDispatch.Created&limit=500").json()["events"]
    actors = {e["data"]["actor"] for e in dispatches if e["data"]["event_name"] == "PreToolUse"}
    assert actors == {f"task:{task['id']}"}

    # Neither secret is in the stores, hooks.log or the server's JSON logs.
    serve.stop()
    stored = [p for p in settings.data_dir.rglob("*") if p.is_file()]
    if settings.database_url is None:
        assert {p.name for p in stored} >= {"tachograph.sqlite", "readmodels.sqlite"}
    for path in [*stored, serve.proc.log]:
        data = path.read_bytes()
        assert token.encode() not in data and ADMIN_KEY.encode() not in data, path
