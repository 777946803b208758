"""A newcomer's first look: a fresh `serve` with no executor, no agent and evolution off.

Every empty view says what to do next with commands to copy; a task queued from the
page says it will not run and why; its detail asks for no workflow it does not have.
The conftest fixture fails each test on any error the page logs.
"""

from __future__ import annotations

from collections.abc import Iterator
from urllib.parse import urlsplit

import pytest

from infra.settings import Settings
from tests.hook_server import HookServer
from tests.support import Server
from tests.web.browser import Browser
from tests.web.conftest import API_KEY, Site, serving
from tests.web.test_operator_page import column

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    """A fresh server as the README starts it: an API key, nothing else configured."""
    base = tmp_path_factory.mktemp("web-newcomer")
    root = base / "workspace"
    root.mkdir()
    (root / "proj").mkdir()
    settings = Settings(data_dir=base / "data", workspace_root=root, api_key=API_KEY)
    env = {"TACHOGRAPH_LOG_SIGNING_KEY": "web-newcomer-signing-key-0123456789abcdef"}
    server = Server(settings, base / "serve.log", env)
    with serving(server, HookServer(), root) as served:  # the hook server is unused
        yield served


def requested(page: Browser, suffix: str) -> list[str]:
    urls: list[str] = page.js("return performance.getEntriesByType('resource').map(e => e.name)")
    return [urlsplit(u).path for u in urls if urlsplit(u).path.endswith(suffix)]


def test_each_empty_view_says_what_to_do_next(page: Browser, site: Site) -> None:
    origin = site.server.url
    # The board: how tasks come to be, the commands to connect an agent, and no executor.
    guide = page.has_text("#board-guide", "No tasks yet")
    assert "tachograph keys issue --role agent --workspace default" in guide
    assert "export TACHOGRAPH_AGENT_TOKEN=" in guide
    assert f"tachograph hook install claude /path/to/project --url {origin}" in guide
    note = page.has_text("#executor-note", "queued tasks will not run")
    assert "TACHOGRAPH_TASK_COMMAND" in note
    page.screenshot("24-newcomer-board")

    # The token's binding follows the workspace the board is filtered on.
    created = site.api.post("/api/workspaces", {"id": "proj", "path": "proj"}, 201)
    assert created["id"] == "proj"
    page.open("tasks")
    page.until(
        lambda: page.js(
            "return [...document.querySelectorAll('#tasks-workspace option')]"
            ".some(o => o.value === 'proj')"
        )
    )
    page.js(
        "const s = document.querySelector('#tasks-workspace');"
        "s.value = 'proj'; s.dispatchEvent(new Event('change'))"
    )
    page.has_text("#board-guide", "keys issue --role agent --workspace proj")

    page.go("sessions")
    sessions = page.has_text("#sessions-empty", "No sessions yet")
    assert f"hook install claude /path/to/project --url {origin}" in sessions
    assert page.find("#sessions-empty pre.command").is_displayed()

    page.go("approvals")
    approvals = page.has_text("#approvals-pending-empty", "Nothing is waiting")
    assert "TACHOGRAPH_APPROVALS=" in approvals and '"match": "git push"' in approvals

    page.go("activity")
    activity = page.has_text("#activity-rows", "No recorded tool call matches")
    assert "tachograph keys issue --role agent" in activity

    page.go("autonomy")
    evolution = page.has_text("#evolution-guide", "Evolution is off")
    assert "session start and with each prompt" in evolution
    assert '{"evolution": true}' in evolution and f"{origin}/api/settings/autonomy" in evolution
    page.screenshot("25-newcomer-autonomy")
    page.until(lambda: page.find("#autonomy-settings").get_attribute("data-loaded") == "true")
    page.find("#autonomy-settings input[name='evolution']").click()
    page.has_text("#settings-done", "evolution is now on")
    page.until(lambda: not page.find("#evolution-guide").is_displayed())
    assert site.api.get("/api/settings/autonomy")["evolution"] is True


def test_a_task_queued_from_the_page_says_it_will_not_run_and_why(
    page: Browser, site: Site
) -> None:
    page.has_text("#live-state", "Live")
    page.find("#new-task-panel summary").click()
    prompt = page.visible("#new-task-prompt")
    prompt.send_keys("Fix the failing parser tests")
    page.find("#new-task button[type='submit']").click()
    done = page.has_text("#new-task-done", "Queued task")
    tasks = site.api.get("/api/tasks")["items"]
    [task] = [t for t in tasks if t["prompt"] == "Fix the failing parser tests"]
    assert task["id"][:8] in done and task["source"] == "user"
    assert page.find("#new-task-prompt").get_attribute("value") == ""
    # Its card comes from the live stream, in the queued column.
    page.until(lambda: column(page, task["id"]) == "queued", timeout=10)
    assert page.find("#executor-note").is_displayed()

    page.find("#new-task-done a").click()
    page.has_text("#task-title", task["id"][:8])
    why = page.has_text("#task-executor-note", "This task will not run")
    assert "No executor is configured" in why and "TACHOGRAPH_TASK_COMMAND" in why
    page.screenshot("26-newcomer-queued-task")
    # A plain task has no workflow: the page never asks for one (no 404 in the console).
    # Two reads of the task (two polls), each of which would have asked for it by now.
    page.until(lambda: len(requested(page, f"/api/tasks/{task['id']}")) >= 2, timeout=10)
    assert site.api.get(f"/api/tasks/{task['id']}")["hasWorkflow"] is False
    assert requested(page, "/workflow") == []


def test_an_empty_prompt_is_refused_on_the_page(page: Browser, site: Site) -> None:
    page.open("tasks")  # whatever view an earlier test left the page on
    if not page.visible("#new-task-panel").get_attribute("open"):
        page.visible("#new-task-panel summary").click()
    page.visible("#new-task-prompt").send_keys("   ")  # satisfies `required`, says nothing
    before = len(site.api.get("/api/tasks")["items"])
    page.find("#new-task button[type='submit']").click()
    page.has_text("#new-task-error", "Write the prompt")
    assert len(site.api.get("/api/tasks")["items"]) == before
