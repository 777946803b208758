"""The operator page follows the role of the key in use (GET /api/whoami).

Keys are minted through POST /api/keys with the server's bootstrap (admin) key; the page
is then loaded with each one. A control the role cannot use is disabled and says why, in
its tooltip and in a line beside it; the server still refuses (403) whatever gets through.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from infra.settings import Settings
from tests.support import Server
from tests.tasks.conftest import wait_until
from tests.web.browser import Browser, failed_request
from tests.web.conftest import API_KEY, STUCK_GOAL, Site

pytestmark = pytest.mark.slow

SLEEPER = {"lines": ["Waiting for review"], "sleep": 60, "on_term": "stopping"}
SETTINGS = ("evolution", "skillCreation", "factRetention", "selfUpdate")
POLICY = "changing the autonomy policy"


@dataclass
class Seeded:
    reader: str
    operator: str
    agent: str
    revision: str
    signal: str


def mint(site: Site, role: str, label: str | None, **extra: Any) -> str:
    body: dict[str, Any] = {"role": role, **extra}
    if label:
        body["label"] = label
    issued = site.api.post("/api/keys", body, 201)
    assert issued["role"] == role
    return str(issued["secret"])


@pytest.fixture(scope="module")
def seeded(site: Site) -> Seeded:
    """Keys of each role, a learned revision to revert and a signal in backoff to ignore."""
    api = site.api
    patched = api.http.patch("/api/settings/autonomy", json={"evolution": True})
    assert patched.status_code == 200, patched.text
    api.post(
        "/api/autonomy/signals",
        {
            "agentId": "roles-agent",
            "traceId": "roles-1",
            "kind": "failure",
            "goal": "Keep the changelog current",
            "failure": "the changelog was skipped",
            "failureClass": "validation",
        },
        201,
    )
    revision = wait_until(
        lambda: api.get("/api/autonomy/revisions", agentId="roles-agent")["items"], timeout=30
    )[0]["id"]
    stuck = api.post(
        "/api/autonomy/signals",
        {
            "agentId": "roles-agent",
            "traceId": "roles-2",
            "kind": "failure",
            "goal": f"This one {STUCK_GOAL}",
            "failure": "reflector down",
        },
        201,
    )["id"]
    wait_until(lambda: api.get(f"/api/autonomy/signals/{stuck}")["attempts"] >= 1, timeout=30)
    return Seeded(
        reader=mint(site, "reader", "alice"),
        operator=mint(site, "operator", "olive"),
        # An agent token is bound to one session or workspace.
        agent=mint(site, "agent", None, workspaceId="default"),
        revision=str(revision),
        signal=str(stuck),
    )


def load_with(browser: Browser, site: Site, key: str, fragment: str = "tasks") -> None:
    """A fresh page load with `key` already in this tab's session."""
    browser.driver.get(f"{site.server.url}/web/style.css")
    browser.js("sessionStorage.clear()")
    browser.js("sessionStorage.setItem('tachograph-key', arguments[0])", key)
    browser.open(fragment)


def disabled_because(page: Browser, css: str, why: str) -> None:
    """`css` is disabled and its tooltip gives the reason."""
    page.until(
        lambda: not page.find(css).is_enabled() and page.find(css).get_attribute("title") == why,
        message=f"{css} is not disabled with the tooltip {why!r}",
    )


def note(page: Browser, css: str) -> str:
    """The visible explanation line (empty when hidden)."""
    element = page.find(css)
    return element.text if element.is_displayed() else ""


def autonomy_loaded(page: Browser, seeded: Seeded) -> None:
    page.go("autonomy")
    page.until(lambda: page.find("#autonomy-settings").get_attribute("data-loaded"))
    page.visible(f"button[data-revert='{seeded.revision}']")
    page.visible(f"[data-signal-id='{seeded.signal}'] button[data-action='ignore']")


def running_task(site: Site) -> str:
    task_id = site.api.task(SLEEPER)
    site.api.wait_status(task_id, "running")
    return task_id


def test_a_reader_sees_its_role_and_every_command_disabled_with_the_reason(
    browser: Browser, site: Site, seeded: Seeded
) -> None:
    task_id = running_task(site)
    load_with(browser, site, seeded.reader, f"tasks/{task_id}")
    page = browser
    page.has_text("#key-role", "reader · alice")
    assert "reader role" in (page.find("#key-role").get_attribute("title") or "")
    page.has_text("#task-status", "running")
    # Reading works: the task's fields are shown, only the commands are not offered.
    page.has_text("#task-fields", task_id)
    disabled_because(
        page, "#task-cancel", "Your key has the reader role; cancelling tasks needs operator."
    )
    disabled_because(
        page, "#task-delete", "Your key has the reader role; deleting tasks needs operator."
    )
    assert not page.find("#task-summary").is_enabled()
    assert note(page, "#task-role-note") == (
        "Your key has the reader role; cancelling, resolving and deleting tasks needs operator."
    )

    autonomy_loaded(page, seeded)
    for name in SETTINGS:
        disabled_because(
            page,
            f"#autonomy-settings input[name='{name}']",
            f"Your key has the reader role; {POLICY} needs admin.",
        )
    assert note(page, "#settings-role-note") == (
        f"Your key has the reader role; {POLICY} needs admin."
    )
    disabled_because(
        page,
        f"button[data-revert='{seeded.revision}']",
        "Your key has the reader role; reverting learned revisions needs operator.",
    )
    disabled_because(
        page,
        f"[data-signal-id='{seeded.signal}'] button[data-action='ignore']",
        "Your key has the reader role; ignoring signals needs operator.",
    )
    assert "needs operator" in note(page, "#signals-role-note")
    assert "needs operator" in note(page, "#revisions-role-note")
    page.screenshot("12-reader-role")

    page.go("tasks")
    page.has_text("#board-updated", "Updated")
    page.visible(f"#board [data-task-id='{task_id}']")
    assert site.api.task_status(task_id) == "running"
    site.api.post(f"/api/tasks/{task_id}/cancel")
    assert page.console_errors() == []


def test_an_operator_runs_commands_but_not_the_admin_only_autonomy_policy(
    browser: Browser, site: Site, seeded: Seeded
) -> None:
    task_id = running_task(site)
    load_with(browser, site, seeded.operator, f"tasks/{task_id}")
    page = browser
    page.has_text("#key-role", "operator · olive")
    page.has_text("#task-status", "running")
    page.until(lambda: page.find("#task-cancel").is_enabled(), message="cancel never enabled")
    assert page.find("#task-cancel").get_attribute("title") == ""
    assert note(page, "#task-role-note") == ""

    page.find("#task-cancel").click()
    page.visible("#confirm-dialog")
    page.find("#confirm-yes").click()
    page.has_text("#task-status", "cancelled")
    assert site.api.task_status(task_id) == "cancelled"

    autonomy_loaded(page, seeded)
    for name in SETTINGS:
        disabled_because(
            page,
            f"#autonomy-settings input[name='{name}']",
            f"Your key has the operator role; {POLICY} needs admin.",
        )
    assert note(page, "#settings-role-note") == (
        f"Your key has the operator role; {POLICY} needs admin."
    )
    assert page.find(f"button[data-revert='{seeded.revision}']").is_enabled()
    ignore = page.find(f"[data-signal-id='{seeded.signal}'] button[data-action='ignore']")
    assert ignore.is_enabled() and ignore.get_attribute("title") == ""
    assert note(page, "#signals-role-note") == ""
    assert note(page, "#revisions-role-note") == ""
    page.screenshot("13-operator-role-autonomy")
    assert page.console_errors() == []


def test_the_admin_key_changes_the_autonomy_policy(
    browser: Browser, site: Site, seeded: Seeded
) -> None:
    load_with(browser, site, API_KEY, "autonomy")
    page = browser
    page.has_text("#key-role", "admin · admin")
    autonomy_loaded(page, seeded)
    for name in SETTINGS:
        box = page.find(f"#autonomy-settings input[name='{name}']")
        assert box.is_enabled() and box.get_attribute("title") == "", name
    assert note(page, "#settings-role-note") == ""
    wanted = not site.api.get("/api/settings/autonomy")["skillCreation"]
    page.find("#autonomy-settings input[name='skillCreation']").click()
    page.has_text("#settings-done", f"skillCreation is now {'on' if wanted else 'off'}")
    assert site.api.get("/api/settings/autonomy")["skillCreation"] is wanted
    assert page.console_errors() == []


def test_an_agent_token_is_told_it_cannot_read(
    browser: Browser, site: Site, seeded: Seeded
) -> None:
    browser.expect_console(
        failed_request("", 401), failed_request("", 403)
    )  # provoked on purpose below
    assert (
        httpx.get(
            f"{site.server.url}/api/whoami", headers={"x-tachograph-key": seeded.agent}
        ).status_code
        == 403
    )
    load_with(browser, site, seeded.agent)
    page = browser
    page.has_text("#key-role", "agent token")
    banner = page.has_text("#role-banner", "agent token")
    assert "cannot read" in banner
    assert page.find("#role-banner").is_displayed()
    # The views say the same rather than a bare "forbidden".
    shown = page.has_text("#board-error", "agent token")
    assert "cannot read" in shown and "(forbidden)" not in shown
    assert not page.find("#key-dialog").is_displayed()
    page.screenshot("14-agent-token")
    # The way out: forget the agent token and enter a reading key.
    page.find("#forget-key").click()
    page.visible("#key-input").send_keys(seeded.reader, "\n")
    page.has_text("#key-role", "reader · alice")
    page.until(lambda: not page.find("#role-banner").is_displayed())
    page.has_text("#board-updated", "Updated")
    assert page.console_errors() == []


def test_a_403_after_the_role_changed_shows_the_servers_message(
    browser: Browser, site: Site, seeded: Seeded
) -> None:
    browser.expect_console(failed_request("/cancel", 403))  # provoked on purpose below
    task_id = running_task(site)
    load_with(browser, site, seeded.operator, f"tasks/{task_id}")
    page = browser
    page.has_text("#key-role", "operator · olive")
    page.until(lambda: page.find("#task-cancel").is_enabled(), message="cancel never enabled")
    # The page still believes its key is an operator's; the server no longer does (the
    # reader's key stands in for a role changed server-side).
    page.js("sessionStorage.setItem('tachograph-key', arguments[0])", seeded.reader)
    refusal = httpx.post(
        f"{site.server.url}/api/tasks/{task_id}/cancel",
        headers={"x-tachograph-key": seeded.reader},
    )
    assert refusal.status_code == 403, refusal.text
    assert refusal.json()["requiredRole"] == "operator" and refusal.json()["role"] == "reader"
    page.find("#task-cancel").click()
    page.visible("#confirm-dialog")
    page.find("#confirm-yes").click()
    shown = page.has_text("#task-action-error", refusal.json()["message"])
    assert "forbidden" in shown
    # The page asks again who it is and stops offering what the key cannot do.
    page.has_text("#key-role", "reader · alice")
    disabled_because(
        page, "#task-cancel", "Your key has the reader role; cancelling tasks needs operator."
    )
    assert site.api.task_status(task_id) == "running"
    site.api.post(f"/api/tasks/{task_id}/cancel")
    assert page.console_errors() == []


@pytest.fixture(scope="module")
def open_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A server without TACHOGRAPH_API_KEY: every caller is admin, no key is asked for."""
    base = tmp_path_factory.mktemp("web-open")
    (base / "workspace").mkdir()
    settings = Settings(data_dir=base / "data", workspace_root=base / "workspace")
    server = Server(settings, base / "serve.log")
    try:
        server.wait_ready()
        yield server
    finally:
        if server.popen.poll() is None:
            server.signal(signal.SIGTERM)
        try:
            server.wait(30)
        finally:
            server.kill()


def test_in_open_mode_the_page_shows_admin_without_asking_for_a_key(
    browser: Browser, open_server: Server
) -> None:
    me = httpx.get(f"{open_server.url}/api/whoami").json()
    assert me["role"] == "admin" and me["authRequired"] is False
    browser.driver.get(f"{open_server.url}/web/style.css")
    browser.js("sessionStorage.clear()")
    browser.driver.get(f"{open_server.url}/#autonomy")
    page = browser
    page.has_text("#key-role", "admin")
    page.has_text("#key-state", "No API key needed")
    assert "needs no API key" in (page.find("#key-role").get_attribute("title") or "")
    page.until(lambda: page.find("#autonomy-settings").get_attribute("data-loaded"))
    for name in SETTINGS:
        assert page.find(f"#autonomy-settings input[name='{name}']").is_enabled(), name
    assert not page.find("#key-dialog").is_displayed()
    assert page.find("#forget-key").get_attribute("hidden") is not None
    assert page.console_errors() == []
