"""A self-update task's workflow on the task detail view, in headless Chromium.

The server runs in this process (uvicorn in a thread) so that self-update tasks can be
created through the task service, as the idle job does: the API queues only user tasks.
Its executor is the stand-in agent of tests/autonomy, scripted by each task's prompt, and
the workspace is a real Git repository, so every cycle clones, inspects, reviews and
imports for real. Screenshots: `web-15-self-update-workflow.png` and
`web-16-self-update-review.png` (see docs/operator-page.md).
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn

from api.app import create_app
from bootstrap import Services
from domain.task_policy import SOURCE_SELF_UPDATE
from infra.settings import Settings
from tests.autonomy.record_collector import collector_port
from tests.support import free_port
from tests.tasks.conftest import wait_until
from tests.web.browser import Browser, failed_request
from tests.web.conftest import API_KEY, Api

pytestmark = pytest.mark.slow

AGENT = str(Path(__file__).resolve().parents[1] / "autonomy" / "self_update_agent.py")
TERMINAL = {"completed", "failed", "dead-letter", "cancelled"}
PHASES = ["prepare", "implement", "inspect", "review", "commit"]
# The stand-in agent replaces the changelog with "- tidy the docs". Its removed lines
# start with "--" (one looks like a file header) and one is markup, which must stay text.
CHANGELOG = "- first release\n-- not a header\n<b>not bold</b>\n"
DISCARD_WHY = "Your key has the reader role; discarding self-update changes needs operator."


def git(repo: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-C", str(repo), *args], capture_output=True, text=True, check=True
    )
    return done.stdout


@dataclass
class WorkflowSite:
    url: str
    api: Api
    services: Services
    repo: Path
    reader: str

    def queue(self, **script: str) -> str:
        """Queue a self-update task with this script, as the idle job would."""
        recorded = self.services.tasks.service.create(  # type: ignore[union-attr]
            "repo", json.dumps(script), None, 1, "test", source=SOURCE_SELF_UPDATE
        )
        return str(recorded.aggregate_id)

    def cycle(self, **script: str) -> tuple[str, dict[str, Any]]:
        """Queue a self-update task with this script; wait until it ends; its workflow."""
        task_id = self.queue(**script)
        wait_until(lambda: self.status(task_id) in TERMINAL, timeout=90, every=0.1)
        return task_id, self.workflow(task_id)

    def status(self, task_id: str) -> str:
        """The task's status, read once the read models have everything written so far."""
        head = self.services.app.recorder.max_notification_id()
        return str(self.api.get(f"/api/tasks/{task_id}", minPosition=head)["status"])

    def workflow(self, task_id: str) -> dict[str, Any]:
        head = self.services.app.recorder.max_notification_id()
        return self.api.get(f"/api/tasks/{task_id}/workflow", minPosition=head)  # type: ignore[no-any-return]

    def refs(self, task_id: str) -> str:
        """The refs this task's cycle left in the registered repository (`git for-each-ref`)."""
        return git(self.repo, "for-each-ref", f"refs/tachograph/self-update/{task_id}")


def make_repo(path: Path) -> Path:
    path.mkdir()
    git(path, "init", "-q", "-b", "main")
    git(path, "config", "user.email", "dev@example.invalid")
    git(path, "config", "user.name", "Dev")
    (path / "README.md").write_text("# repo\n")
    (path / "CHANGELOG.md").write_text(CHANGELOG)
    git(path, "add", "-A")
    git(path, "commit", "-q", "-m", "first")
    return path


@contextmanager
def running_site(base: Path, **extra: Any) -> Iterator[WorkflowSite]:
    """An in-process server whose executor runs the stand-in, the repository registered."""
    root = base / "workspace"
    root.mkdir()
    repo = make_repo(root / "repo")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    settings = Settings(
        data_dir=base / "data",
        workspace_root=root,
        api_key=API_KEY,
        # The jail hides the state directory; the stand-in reaches it through the
        # collector's port, relayed in (tests/autonomy/record_collector.py).
        task_command=(
            sys.executable,
            AGENT,
            "{prompt}",
            str(base / "agent-state"),
            "--collector",
            str(collector_port()),
        ),
        self_update_forward=(collector_port(),),
        task_poll_interval_s=0.1,
        task_kill_grace_s=1.0,
        task_timeout_s=60.0,
        url=url,
        log_signing_key="web-workflow-test-signing-key-0123456789abcdef",
        reflection_interval_s=3600.0,
        self_update_idle_interval_s=3600.0,
        self_update_reconcile_interval_s=3600.0,
        **extra,
    )
    app = create_app(settings)
    server = uvicorn.Server(
        uvicorn.Config(
            app, host="127.0.0.1", port=port, log_config=None, access_log=False, lifespan="on"
        )
    )
    thread = threading.Thread(target=server.run, name="web-workflow-serve", daemon=True)
    thread.start()
    try:
        with httpx.Client(base_url=url, headers={"x-tachograph-key": API_KEY}, timeout=15) as http:
            wait_until(lambda: server.started, timeout=30, every=0.05)
            api = Api(http)
            api.post("/api/workspaces", {"id": "repo", "path": "repo"}, 201)
            reader = api.post("/api/keys", {"role": "reader", "label": "rita"}, 201)["secret"]
            yield WorkflowSite(url, api, app.state.services, repo, str(reader))
    finally:
        server.should_exit = True
        thread.join(30)
        assert not thread.is_alive(), "the in-process server did not stop"


@pytest.fixture(scope="module")
def flow_site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WorkflowSite]:
    with running_site(tmp_path_factory.mktemp("web-workflow")) as site:
        yield site


@pytest.fixture(scope="module")
def browser(flow_site: WorkflowSite) -> Iterator[Browser]:
    opened = Browser(flow_site.url)
    try:
        yield opened
    finally:
        opened.close()


def load_with(browser: Browser, key: str, fragment: str) -> Browser:
    """A fresh page load with `key` already in this tab's session."""
    browser.driver.get(f"{browser.base_url}/web/style.css")
    browser.js("sessionStorage.clear()")
    browser.js("sessionStorage.setItem('tachograph-key', arguments[0])", key)
    browser.open(fragment)
    return browser


def checked(page: Browser, task_id: str) -> None:
    """Wait until the page has the workflow route's answer for this task."""
    page.until(
        lambda: page.find("#task-workflow").get_attribute("data-checked") == task_id,
        message="the workflow was never asked for",
    )


def shown_phases(page: Browser) -> list[list[tuple[str, str]]]:
    """Each attempt's steps as the page shows them: (phase, status), in order."""
    return [
        [(str(step[0]), str(step[1])) for step in attempt]
        for attempt in page.js(
            "return [...document.querySelectorAll('#workflow-attempts .wf-attempt')].map(a =>"
            " [...a.querySelectorAll('.phase')].map(p => [p.dataset.phase, p.dataset.status]))"
        )
    ]


def diff_lines(page: Browser, kind: str = "") -> list[str]:
    return page.js(  # type: ignore[no-any-return]
        "return [...document.querySelectorAll('#workflow-diff .dl' + arguments[0])]"
        ".map(e => e.textContent)",
        f".dl-{kind}" if kind else "",
    )


def test_an_imported_change_shows_phases_diff_digest_and_ref_and_discard_deletes_the_ref(
    browser: Browser, flow_site: WorkflowSite
) -> None:
    task_id, flow = flow_site.cycle(implement="commit", review="approve")
    assert [(p["phase"], p["status"]) for p in flow["phases"]] == [(p, "ok") for p in PHASES]
    inspected = flow["phases"][2]["evidence"]
    digest, patch, ref, commit = (
        inspected["digest"],
        inspected["patch"],
        flow["ref"],
        flow["commit"],
    )
    assert ref == f"refs/tachograph/self-update/{task_id}"
    assert git(flow_site.repo, "rev-parse", ref).strip() == commit

    page = load_with(browser, API_KEY, f"tasks/{task_id}")
    page.has_text("#task-status", "completed")
    page.visible("#task-workflow")
    page.has_text("#workflow-state", "imported")
    assert shown_phases(page) == [[(p, "ok") for p in PHASES]]
    assert "main at " + flow["phases"][0]["evidence"]["head"][:12] in page.text("#workflow-fields")

    # The patch, line for line, each styled by what it is; markup in it stays text.
    assert diff_lines(page) == patch.splitlines()
    assert diff_lines(page, "add") == ["+- tidy the docs"]
    assert diff_lines(page, "del") == ["-- first release", "--- not a header", "-<b>not bold</b>"]
    assert diff_lines(page, "hunk") == ["@@ -1,3 +1 @@"]
    meta = diff_lines(page, "meta")
    assert "--- a/CHANGELOG.md" in meta and "+++ b/CHANGELOG.md" in meta
    assert page.js("return document.querySelectorAll('#workflow-diff b').length") == 0
    head = page.text("#workflow-diff .diff-file-head")
    assert "CHANGELOG.md" in head and "+1 −3" in head
    styles = page.js(
        "return ['add', 'del', 'ctx'].map(k => { const e = document.createElement('div');"
        " e.className = 'dl dl-' + k; document.querySelector('#workflow-diff').append(e);"
        " const c = getComputedStyle(e).backgroundColor; e.remove(); return c; })"
    )
    assert len(set(styles)) == 3, f"added, removed and context lines look alike: {styles}"

    fields = page.text("#workflow-fields")
    assert digest.startswith("sha256:") and digest in fields
    assert ref in fields and commit in fields
    files = page.text("#workflow-files")
    assert "modified" in files and "CHANGELOG.md" in files
    verdict = page.text("#workflow-verdict")
    assert verdict == flow["phases"][3]["evidence"]["verdict"]
    assert f"APPROVE {digest}" in verdict

    discard = page.find("#workflow-discard")
    assert discard.is_displayed() and discard.is_enabled()
    assert not page.find("#workflow-role-note").is_displayed()
    page.js("document.querySelector('#task-workflow').scrollIntoView()")
    page.screenshot("15-self-update-workflow")

    # Declining changes nothing.
    discard.click()
    page.visible("#confirm-dialog")
    assert page.text("#confirm-title") == "Discard this imported change?"
    assert ref in page.text("#confirm-body")
    page.find("#confirm-no").click()
    page.until(lambda: not page.find("#confirm-dialog").is_displayed())
    assert ref in flow_site.refs(task_id)

    page.find("#workflow-discard").click()
    page.visible("#confirm-dialog")
    page.find("#confirm-yes").click()
    page.has_text("#workflow-action-done", f"Discarded: {ref}")
    page.has_text("#workflow-state", "discarded")
    page.until(lambda: not page.find("#workflow-discard").is_enabled())
    page.has_text("#workflow-discard-help", "by key:admin")
    page.has_text("#workflow-fields", "deleted from the repository")
    assert page.js("return document.activeElement.id") == "workflow-title"
    assert flow_site.refs(task_id) == ""
    after = flow_site.workflow(task_id)
    assert after["discardedAt"] is not None and after["discardedBy"] == "key:admin"
    # The same view, loaded afresh, still offers nothing to discard.
    page = load_with(browser, API_KEY, f"tasks/{task_id}")
    page.has_text("#workflow-state", "discarded")
    assert not page.find("#workflow-discard").is_enabled()
    assert page.console_errors() == []


def test_a_reader_sees_the_workflow_but_discard_is_disabled_with_the_reason(
    browser: Browser, flow_site: WorkflowSite
) -> None:
    task_id, flow = flow_site.cycle(implement="commit", review="approve")
    page = load_with(browser, flow_site.reader, f"tasks/{task_id}")
    page.has_text("#key-role", "reader · rita")
    page.has_text("#workflow-state", "imported")
    page.has_text("#workflow-fields", flow["ref"])
    assert diff_lines(page, "add") == ["+- tidy the docs"]
    page.until(
        lambda: (
            not page.find("#workflow-discard").is_enabled()
            and page.find("#workflow-discard").get_attribute("title") == DISCARD_WHY
        ),
        message="Discard is not disabled with the role's reason",
    )
    assert page.find("#workflow-discard").is_displayed()
    assert page.find("#workflow-role-note").text == DISCARD_WHY
    # The server refuses it too; the ref stays.
    refused = httpx.post(
        f"{flow_site.url}/api/tasks/{task_id}/discard",
        headers={"x-tachograph-key": flow_site.reader},
    )
    assert refused.status_code == 403, refused.text
    assert flow["ref"] in flow_site.refs(task_id)
    flow_site.api.post(f"/api/tasks/{task_id}/discard")
    assert page.console_errors() == []


def test_a_discard_by_another_operator_first_shows_the_apis_refusal(
    browser: Browser, flow_site: WorkflowSite
) -> None:
    browser.expect_console(failed_request("/discard", 409))  # provoked on purpose below
    task_id, flow = flow_site.cycle(implement="commit", review="approve")
    page = load_with(browser, API_KEY, f"tasks/{task_id}")
    page.has_text("#workflow-state", "imported")
    page.until(lambda: page.find("#workflow-discard").is_enabled())
    page.find("#workflow-discard").click()
    page.visible("#confirm-dialog")
    # While this page's confirmation is open, someone else discards the change.
    flow_site.api.post(f"/api/tasks/{task_id}/discard", {"reason": "superseded"})
    assert flow_site.refs(task_id) == ""
    page.find("#confirm-yes").click()
    shown = page.has_text("#workflow-action-error", "Refused:")
    assert "(invalid_state)" in shown
    page.has_text("#workflow-state", "discarded")
    page.until(lambda: not page.find("#workflow-discard").is_enabled())
    assert page.console_errors() == []


def test_a_rejected_change_shows_the_phases_it_reached_and_nothing_to_discard(
    browser: Browser, flow_site: WorkflowSite
) -> None:
    task_id, flow = flow_site.cycle(implement="commit", review="reject")
    assert flow["ref"] is None
    page = load_with(browser, API_KEY, f"tasks/{task_id}")
    page.has_text("#workflow-state", "rejected")
    assert shown_phases(page) == [
        [
            ("prepare", "ok"),
            ("implement", "ok"),
            ("inspect", "ok"),
            ("review", "rejected"),
            ("commit", "not-reached"),
        ]
    ]
    page.has_text("#workflow-attempts", "REJECT: the change is not needed")
    page.has_text("#workflow-verdict", "REJECT: the change is not needed")
    page.has_text("#workflow-fields", "nothing imported")
    assert diff_lines(page, "add") == ["+- tidy the docs"]
    assert not page.find("#workflow-discard").is_displayed()
    page.has_text("#workflow-discard-help", "nothing to discard")
    assert flow_site.refs(task_id) == ""
    assert page.console_errors() == []


def test_a_task_without_a_cycle_has_no_workflow_section(
    browser: Browser, flow_site: WorkflowSite
) -> None:
    with_flow, _ = flow_site.cycle(implement="noop", review="approve")
    # A user task in the same repository: it runs in the checkout, without a cycle.
    task_id = flow_site.api.task(
        {"implement": "noop", "review": "approve"}, workspaceId="repo", maxAttempts=1
    )
    wait_until(lambda: flow_site.status(task_id) in TERMINAL, timeout=60, every=0.1)
    assert flow_site.api.http.get(f"/api/tasks/{task_id}/workflow").status_code == 404

    page = load_with(browser, API_KEY, f"tasks/{with_flow}")
    page.has_text("#workflow-state", "no-op")
    assert shown_phases(page) == [
        [
            ("prepare", "ok"),
            ("implement", "ok"),
            ("inspect", "noop"),
            ("review", "not-reached"),
            ("commit", "not-reached"),
        ]
    ]
    assert not page.find("#workflow-change").is_displayed()
    # Following a link to a task without a cycle hides the section (not the previous one's).
    page.go(f"tasks/{task_id}")
    page.has_text("#task-title", task_id[:8])
    checked(page, task_id)
    assert not page.find("#task-workflow").is_displayed()
    page.has_text("#task-status", "completed")
    assert page.console_errors() == []


# Reviews by a person (TACHOGRAPH_SELF_UPDATE_REVIEW=operator), from the page.

REVIEW_WHY = "Your key has the reader role; reviewing self-update changes needs operator."


@pytest.fixture(scope="module")
def review_site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WorkflowSite]:
    with running_site(tmp_path_factory.mktemp("web-review"), self_update_review="operator") as site:
        yield site


@pytest.fixture(scope="module")
def review_browser(review_site: WorkflowSite) -> Iterator[Browser]:
    opened = Browser(review_site.url)
    try:
        yield opened
    finally:
        opened.close()


def awaiting_digest(site: WorkflowSite, task_id: str) -> str:
    """Wait until the cycle waits for a person; the digest its inspect phase shows."""

    def inspected() -> str | None:
        answer = site.api.http.get(f"/api/tasks/{task_id}/workflow")
        if answer.status_code != 200:
            return None
        last = answer.json()["phases"][-1]
        done = (last["phase"], last["status"]) == ("inspect", "ok")
        return str(last["evidence"]["digest"]) if done else None

    wait_until(lambda: inspected() is not None, timeout=60, every=0.1)
    digest = inspected()
    assert digest is not None
    return digest


def test_an_operator_approves_the_awaited_patch_from_the_page(
    review_browser: Browser, review_site: WorkflowSite
) -> None:
    task_id = review_site.queue(implement="commit", review="approve")
    digest = awaiting_digest(review_site, task_id)

    # A reader sees what waits, but cannot decide it.
    page = load_with(review_browser, review_site.reader, f"tasks/{task_id}")
    page.visible("#workflow-review")
    page.has_text("#workflow-review-help", digest)
    page.until(
        lambda: (
            not page.find("#workflow-approve").is_enabled()
            and page.find("#workflow-approve").get_attribute("title") == REVIEW_WHY
            and not page.find("#workflow-reject").is_enabled()
        ),
        message="the review buttons are not disabled with the role's reason",
    )

    page = load_with(review_browser, API_KEY, f"tasks/{task_id}")
    page.visible("#workflow-review")
    assert diff_lines(page, "add") == ["+- tidy the docs"]
    page.find("#workflow-review-reason").send_keys("Read the changelog diff")
    page.js("document.querySelector('#workflow-review').scrollIntoView()")
    page.screenshot("16-self-update-review")
    page.until(lambda: page.find("#workflow-approve").is_enabled())
    page.find("#workflow-approve").click()
    page.visible("#confirm-dialog")
    assert digest in page.text("#confirm-body")
    page.find("#confirm-yes").click()
    page.has_text("#workflow-action-done", f"Approved {digest}")
    wait_until(lambda: review_site.status(task_id) in TERMINAL, timeout=60, every=0.1)
    page.has_text("#workflow-state", "imported")
    page.until(lambda: not page.find("#workflow-review").is_displayed())
    flow = review_site.workflow(task_id)
    review = [p for p in flow["phases"] if p["phase"] == "review"][-1]
    assert review["status"] == "ok"
    assert review["evidence"]["actor"] == "key:admin"
    assert review["evidence"]["reason"] == "Read the changelog diff"
    assert review["evidence"]["echoed"] == digest
    assert git(review_site.repo, "rev-parse", flow["ref"]).strip() == flow["commit"]
    assert page.console_errors() == []


def test_an_operator_rejects_from_the_page_and_nothing_is_imported(
    review_browser: Browser, review_site: WorkflowSite
) -> None:
    task_id = review_site.queue(implement="commit", review="approve")
    awaiting_digest(review_site, task_id)
    page = load_with(review_browser, API_KEY, f"tasks/{task_id}")
    page.visible("#workflow-review")
    page.until(lambda: page.find("#workflow-reject").is_enabled())
    page.find("#workflow-reject").click()
    page.visible("#confirm-dialog")
    page.find("#confirm-yes").click()
    page.has_text("#workflow-action-done", "Rejected")
    wait_until(lambda: review_site.status(task_id) in TERMINAL, timeout=60, every=0.1)
    page.has_text("#workflow-state", "rejected")
    page.until(lambda: not page.find("#workflow-review").is_displayed())
    assert review_site.refs(task_id) == ""
    flow = review_site.workflow(task_id)
    assert flow["phases"][-1]["phase"] == "review"
    assert flow["phases"][-1]["evidence"]["verdict"] == "rejected"
    assert page.console_errors() == []
