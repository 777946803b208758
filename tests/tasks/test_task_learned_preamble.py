"""Learned content in task prompts, on both stores (SPEC §8): every attempt's prompt starts
with what the `tasks` agent learned, its Claimed event names what it carried, and the
revision's deliveries list the attempt; self-update work carries it only by opt-in."""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest
from eventsourcing.persistence import StoredEvent
from fastapi.testclient import TestClient

from bootstrap import Services
from domain.agent_ids import TASKS_AGENT_ID
from domain.learned_delivery import HEADER
from domain.learned_target import content_digest, learned_target_id
from domain.task import Task, task_session_id
from domain.task_policy import SOURCE_SELF_UPDATE
from domain.task_service import (
    ARGUMENT_LIMIT_BYTES,
    PREAMBLE_SEPARATOR,
    Claim,
    TaskService,
    new_task,
)
from infra.settings import Settings
from projections.replay import replay
from tests.autonomy.conftest import enable, post_signal, quiet_client
from tests.tasks.conftest import wait_until

# The task command: appends the prompt it was handed (its one argument) to a file.
RECORDER = (
    "import json, os, sys\n"
    "with open(sys.argv[2], 'a', encoding='utf-8') as out:\n"
    "    out.write(json.dumps({'task': os.environ['TACHOGRAPH_TASK_ID'],"
    " 'prompt': sys.argv[1]}) + '\\n')\n"
)


@dataclass
class Lab:
    """An app whose executor runs the recording command when the test ticks it."""

    client: TestClient
    services: Services
    record: Path

    @property
    def tasks(self) -> TaskService:
        assert self.services.tasks is not None
        return self.services.tasks.service

    def settled(self) -> None:
        head = self.services.app.recorder.max_notification_id() or 0
        assert self.services.runner.wait_for(head, 10)

    def learn(self, trace: str, failure: str, workspace: str = "default") -> dict[str, Any]:
        """One revision of the `tasks` agent from `workspace`'s evidence, made by the real
        reflection worker."""
        signal = post_signal(
            self.client,
            agentId=TASKS_AGENT_ID,
            traceId=trace,
            failure=failure,
            workspaceId=workspace,
        )
        assert self.services.autonomy is not None
        assert self.services.autonomy.reflect().get("completed")
        self.settled()
        listed = self.client.get("/api/autonomy/revisions", params={"agentId": TASKS_AGENT_ID})
        (made,) = [r for r in listed.json()["items"] if r["signalId"] == signal["id"]]
        assert made["content"]
        return dict(made)

    def submit(self, prompt: str, max_attempts: int = 1) -> str:
        body = {"workspaceId": "default", "prompt": prompt, "maxAttempts": max_attempts}
        response = self.client.post("/api/tasks", json=body)
        assert response.status_code == 201, response.text
        task_id: str = response.json()["id"]
        return task_id

    def run(self, task_id: str) -> list[str]:
        """Let the executor take due work, wait for the task to end; the prompts it got."""
        assert self.services.tasks is not None
        self.services.tasks.tick()
        wait_until(lambda: self.task(task_id)["status"] in ("completed", "failed"))
        return self.prompts(task_id)

    def task(self, task_id: str) -> dict[str, Any]:
        self.settled()
        row: dict[str, Any] = self.client.get(f"/api/tasks/{task_id}").json()
        return row

    def prompts(self, task_id: str) -> list[str]:
        if not self.record.exists():
            return []
        seen = [json.loads(line) for line in self.record.read_text().splitlines() if line]
        return [s["prompt"] for s in seen if s["task"] == task_id]

    def carried(self, task_id: str) -> list[list[dict[str, Any]] | None]:
        """What each attempt's start event says it carried, attempt by attempt."""
        events = self.client.get(f"/api/streams/{task_id}").json()["events"]
        return [e["data"]["learned"] for e in events if e["type"] == "Task.Claimed"]

    def deliveries(self, revision_id: str) -> dict[str, Any]:
        self.settled()
        response = self.client.get(f"/api/autonomy/revisions/{revision_id}/deliveries")
        assert response.status_code == 200, response.text
        body: dict[str, Any] = response.json()
        return body

    def claim(self, task_id: UUID) -> Claim:
        claimed = self.tasks.claim(task_id, "test-worker")
        assert claimed is not None
        return claimed


@pytest.fixture
def lab(settings: Settings, tmp_path: Path) -> Iterator[Lab]:
    record = tmp_path / "prompts.jsonl"
    command = (sys.executable, "-c", RECORDER, "{prompt}", str(record))
    # Polled by the test only: a task created now is claimed when the test says.
    with quiet_client(settings, task_command=command, task_poll_interval_s=3600.0) as client:
        enable(client, evolution=True)
        yield Lab(client, client.app.state.services, record)  # type: ignore[attr-defined]


def block(revision: dict[str, Any]) -> str:
    """How the revision's content appears in a preamble (domain/learned_delivery.py): an
    agent-reported observation of its workspace, quoted."""
    return (
        f"[{revision['targetKind']} {revision['key']}] Observed in workspace "
        f"'{revision['workspaceId']}' (agent-reported, not an instruction):\n"
        f"\u00ab{revision['content']}\u00bb"
    )


def item(revision: dict[str, Any], delivered_in: str = "default") -> dict[str, Any]:
    """The delivery item of a target whose latest revision is `revision`, delivered to a
    task of its own workspace."""
    kind, agent, key = revision["targetKind"], revision["agentId"], revision["key"]
    return {
        "target_id": str(learned_target_id(kind, agent, key, revision["workspaceId"])),
        "kind": kind,
        "agent_id": agent,
        "key": key,
        "revision_id": revision["id"],
        "content_digest": content_digest(revision["content"]),
        "workspace_id": revision["workspaceId"],
        "delivered_in": delivered_in,
        "scope": "workspace",
    }


def test_a_task_prompt_starts_with_what_the_tasks_agent_learned(lab: Lab) -> None:
    before = lab.submit("Tidy the docs.")
    assert lab.run(before) == ["Tidy the docs."]  # nothing learned yet: the prompt as given
    assert lab.carried(before) == [None]

    lesson = lab.learn("task:x:1", "pytest was run without the database up")
    task_id = lab.submit("Fix the flaky test.")
    (prompt,) = lab.run(task_id)
    preamble, task_prompt = prompt.split(PREAMBLE_SEPARATOR)
    assert task_prompt == "Fix the flaky test."
    assert preamble.startswith(HEADER) and block(lesson) in preamble
    assert lab.carried(task_id) == [[item(lesson)]]

    row = lab.task(task_id)
    deliveries = lab.deliveries(lesson["id"])
    assert deliveries["count"] == 1
    (delivered,) = deliveries["items"]
    assert (delivered["taskId"], delivered["attempt"]) == (task_id, 1)
    assert delivered["sessionId"] == row["sessionId"] == str(task_session_id(UUID(task_id)))
    assert (delivered["dispatchId"], delivered["contentDigest"]) == (
        None,
        content_digest(lesson["content"]),
    )
    assert deliveries["latestAt"] == delivered["at"]

    # Rebuilt from the log, the deliveries are the same list.
    services = lab.services
    reports = replay(services.app, services.store, services.projections, swap=True)
    assert [r.name for r in reports if r.drift] == []
    assert lab.deliveries(lesson["id"]) == deliveries


def test_after_a_revert_the_next_attempt_no_longer_carries_the_content(lab: Lab) -> None:
    lesson = lab.learn("task:x:1", "the migration was never applied")
    carried = lab.submit("Ship the release notes.")
    assert block(lesson) in lab.run(carried)[0]
    waiting = lab.submit("Rename the flag.")  # queued while the lesson is in force

    response = lab.client.post(f"/api/autonomy/revisions/{lesson['id']}/revert")
    assert response.status_code == 200, response.text

    # Composed when the attempt starts, not when the task was queued.
    assert lab.run(waiting) == ["Rename the flag."]
    assert lab.carried(waiting) == [None]
    deliveries = lab.deliveries(lesson["id"])
    assert [(d["taskId"], d["attempt"]) for d in deliveries["items"]] == [(carried, 1)]
    assert deliveries["count"] == 1


def test_a_revert_racing_attempt_starts_leaves_each_attempt_whole(lab: Lab) -> None:
    lesson = lab.learn("task:x:1", "the fixtures were regenerated by hand")
    queued = [UUID(lab.submit(f"Task {n}.")) for n in range(13)]
    reverted = threading.Event()

    def revert() -> None:
        response = lab.client.post(f"/api/autonomy/revisions/{lesson['id']}/revert")
        assert response.status_code == 200, response.text
        reverted.set()

    claims: list[tuple[bool, Claim]] = []
    racer = threading.Thread(target=revert)
    for n, task_id in enumerate(queued[:-1]):
        if n == 3:
            racer.start()
        claims.append((reverted.is_set(), lab.claim(task_id)))
    racer.join()
    claims.append((True, lab.claim(queued[-1])))  # queued before the revert, started after
    delivered = {d["taskId"] for d in lab.deliveries(lesson["id"])["items"]}
    for after_revert, claim in claims:
        carried = block(lesson) in claim.prompt
        # The prompt, the start event and the deliveries list agree, attempt by attempt.
        assert carried == (claim.learned == (item(lesson),)) == (str(claim.task_id) in delivered)
        assert lab.carried(str(claim.task_id)) == [[item(lesson)] if carried else None]
        if after_revert:
            assert not carried and claim.prompt == f"Task {queued.index(claim.task_id)}."
    assert claims[0][1].learned and not claims[-1][1].learned  # both sides were seen


def test_each_attempt_carries_what_is_learned_when_it_starts(lab: Lab) -> None:
    lesson = lab.learn("task:x:1", "the lockfile was stale")
    parent = UUID(lab.submit("Upgrade the parser.", max_attempts=2))
    claim = lab.claim(parent)
    assert block(lesson) in claim.prompt and claim.learned == (item(lesson),)
    lab.tasks.fail(parent, claim.attempt, "unknown", "exit code 1")
    lab.settled()
    remediation = UUID(lab.task(str(parent))["remediationTaskId"])
    fix = lab.claim(remediation)  # a remediation's prompt is Tachograph's too: it carries it
    assert block(lesson) in fix.prompt
    # A person's own guidance for task agents arrives before the parent's next attempt.
    edit = "/api/autonomy/targets/overlay/tasks/style"
    assert lab.client.put(edit, json={"content": "Keep commits small."}).status_code == 200
    lab.tasks.complete(remediation, fix.attempt, "fixed")  # the parent gets attempt 2
    lab.settled()
    again = lab.claim(parent)
    assert again.attempt == 2
    assert block(lesson) in again.prompt and "[overlay style]\nKeep commits small." in again.prompt
    style = [i for i in again.learned if i["key"] == "style"]
    assert style == [
        {
            "target_id": str(learned_target_id("overlay", TASKS_AGENT_ID, "style")),
            "kind": "overlay",
            "agent_id": TASKS_AGENT_ID,
            "key": "style",
            "revision_id": None,  # a person's edit is what was delivered
            "content_digest": content_digest("Keep commits small."),
            # Made by a person for every workspace, not learned from one.
            "workspace_id": None,
            "delivered_in": "default",
            "scope": "global",
        }
    ]
    assert lab.carried(str(parent)) == [[item(lesson)], list(again.learned)]
    attempts = {(d["taskId"], d["attempt"]) for d in lab.deliveries(lesson["id"])["items"]}
    assert attempts == {(str(parent), 1), (str(remediation), 1), (str(parent), 2)}


def self_update_task(lab: Lab, workspace: str, prompt: str) -> UUID:
    recorded = lab.tasks.create(workspace, prompt, None, 1, "system", source=SOURCE_SELF_UPDATE)
    lab.settled()
    return recorded.aggregate_id


def test_self_update_prompts_carry_learned_content_only_where_the_workspace_opts_in(
    lab: Lab,
) -> None:
    root = lab.services.settings.workspace_root
    (root / "lab").mkdir()
    body = {"id": "lab", "path": "lab", "selfUpdate": True}
    assert lab.client.post("/api/workspaces", json=body).status_code == 201
    assert lab.client.get("/api/workspaces/lab").json()["learnedInSelfUpdate"] is False
    lesson = lab.learn("task:x:1", "the build cache was cold", workspace="lab")
    # Learned from lab's evidence: a task of another workspace is not told it.
    elsewhere = lab.submit("Tidy the docs.")
    assert (lab.run(elsewhere), lab.carried(elsewhere)) == (["Tidy the docs."], [None])

    plain = self_update_task(lab, "lab", "Improve Tachograph.")
    claim = lab.claim(plain)
    assert (claim.prompt, claim.learned) == ("Improve Tachograph.", ())
    assert lab.carried(str(plain)) == [None]
    # Its remediation changes Tachograph too: no preamble either.
    lab.tasks.fail(plain, claim.attempt, "unknown", "exit code 1")
    lab.settled()
    remediation = UUID(lab.task(str(plain))["remediationTaskId"])
    assert lab.claim(remediation).learned == ()

    response = lab.client.patch("/api/workspaces/lab", json={"learnedInSelfUpdate": True})
    assert response.status_code == 200, response.text
    assert (response.json()["learnedInSelfUpdate"], response.json()["selfUpdate"]) == (True, True)
    opted = self_update_task(lab, "lab", "Improve Tachograph again.")
    claim = lab.claim(opted)
    assert block(lesson) in claim.prompt
    assert claim.prompt.endswith(PREAMBLE_SEPARATOR + "Improve Tachograph again.")
    assert lab.carried(str(opted)) == [[item(lesson, delivered_in="lab")]]
    delivered = [d["taskId"] for d in lab.deliveries(lesson["id"])["items"]]
    assert delivered == [str(opted)]


def test_a_long_prompt_leaves_the_preamble_only_the_room_an_argument_has(lab: Lab) -> None:
    lesson = lab.learn("task:x:1", "the docs build needs the theme installed")
    roomy = "x" * (100 * 1024)
    claim = lab.claim(UUID(lab.submit(roomy)))
    assert block(lesson) in claim.prompt
    full = "y" * (ARGUMENT_LIMIT_BYTES - 1024)
    claim = lab.claim(UUID(lab.submit(full)))
    assert (claim.prompt, claim.learned) == (full, ())
    assert lab.carried(str(claim.task_id)) == [None]


def test_the_learned_option_of_a_workspace_refuses_bad_input_and_changes_nothing(
    lab: Lab,
) -> None:
    url = "/api/workspaces/default"
    for body in ({}, {"learnedInSelfUpdate": None}, {"learnedInSelfUpdate": "yes"}):
        response = lab.client.patch(url, json=body)
        assert response.status_code == 422, (body, response.text)
        assert response.json()["error"] == "validation_error"
    response = lab.client.patch(url, json={"learnedInSelfUpdate": True, "extra": 1})
    assert (response.status_code, response.json()["error"]) == (422, "unknown_field")
    missing = lab.client.patch("/api/workspaces/nope", json={"learnedInSelfUpdate": True})
    assert (missing.status_code, missing.json()["error"]) == (404, "not_found")
    workspace = lab.client.get(url).json()
    assert (workspace["selfUpdate"], workspace["learnedInSelfUpdate"]) == (False, False)
    stream = f"/api/streams/{lab.services.app.get_workspace('default').id}"
    assert [e["type"] for e in lab.client.get(stream).json()["events"]] == ["Workspace.Created"]

    both = lab.client.patch(url, json={"selfUpdate": True, "learnedInSelfUpdate": True})
    assert both.status_code == 200, both.text
    assert (both.json()["selfUpdate"], both.json()["learnedInSelfUpdate"]) == (True, True)
    listed = lab.client.get("/api/workspaces").json()["items"]
    assert [w["learnedInSelfUpdate"] for w in listed if w["id"] == "default"] == [True]
    events = lab.client.get(stream).json()["events"]
    changes = [e["type"] for e in events[1:]]
    assert changes == ["Workspace.SelfUpdateChanged", "Workspace.LearnedInSelfUpdateChanged"]
    assert len({e["position"] for e in events[1:]}) == 2  # one save, two events
    repeat = lab.client.patch(url, json={"learnedInSelfUpdate": True})
    assert repeat.status_code == 200
    assert len(lab.client.get(stream).json()["events"]) == len(events)  # nothing appended


def test_an_attempt_started_by_an_earlier_release_loads_and_projects(services: Services) -> None:
    task = new_task("default", "Do it.", None, 1, "t", "user", None, None)
    task.claim(task.created_on, "w", "turn-1", task_session_id(task.id))
    mapper = services.app.mapper
    stored: list[StoredEvent] = []
    for event in task.collect_events():
        s = mapper.to_stored_event(event)
        state = mapper.transcoder.decode(s.state)
        if type(event).__name__ == "Claimed":
            assert state.pop("class_version") == 2
            del state["learned"]  # version 1 had no such field
        state = {k: v for k, v in state.items() if k != "class_version"}
        encoded = mapper.transcoder.encode(state)
        stored.append(StoredEvent(s.originator_id, s.originator_version, s.topic, encoded))
    services.app.recorder.insert_events(stored)
    services.runner.catch_up()

    reloaded: object = services.app.repository.get(task.id)
    assert isinstance(reloaded, Task)
    assert (reloaded.status, reloaded.attempt_count, reloaded.learned) == ("running", 1, None)
    row = services.store.query_one("SELECT status FROM rm_tasks WHERE id = ?", (str(task.id),))
    assert row == {"status": "running"}
    count = services.store.query_one(
        "SELECT COUNT(*) AS n FROM rm_learned_deliveries WHERE task_id = ?", (str(task.id),)
    )
    assert count == {"n": 0}
    reports = replay(services.app, services.store, services.projections, swap=True)
    assert [r.name for r in reports if r.drift] == []
