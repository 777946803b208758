"""The operator page in headless Chromium against a real `tachograph serve` with seeded data.

Screenshots of each view go to `artefacts/` (see docs/operator-page.md).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support.select import Select

from tests.tasks.conftest import wait_until
from tests.web.browser import Browser, failed_request
from tests.web.conftest import API_KEY, STUCK_GOAL, Site

pytestmark = pytest.mark.slow

SLEEPER = {"lines": ["Refactoring the parser"], "sleep": 60, "on_term": "stopping"}


def column(page: Browser, task_id: str) -> str | None:
    """The board column a task's card is in (None when it has no card)."""
    return page.js(  # type: ignore[no-any-return]
        "const c = document.querySelector(`#board [data-task-id='${arguments[0]}']`);"
        "return c ? c.closest('.column').dataset.status : null",
        task_id,
    )


def confirm(page: Browser, button_css: str, answer: str = "#confirm-yes") -> str:
    """Press an action button, check the confirmation dialog, answer it; return its question."""
    page.find(button_css).click()
    page.visible("#confirm-dialog")
    question = page.text("#confirm-title")
    page.find(answer).click()
    page.until(lambda: not page.find("#confirm-dialog").is_displayed())
    return question


def tab_until(page: Browser, wanted: str, presses: int = 80) -> None:
    """Move focus with the Tab key only until the element matching `wanted` has it."""
    page.js("document.activeElement && document.activeElement.blur(); window.focus()")
    for _ in range(presses):
        ActionChains(page.driver).send_keys(Keys.TAB).perform()
        if page.js("return document.activeElement.matches(arguments[0])", wanted):
            return
    raise AssertionError(f"{wanted} is not reachable with the Tab key")


def test_page_asks_for_the_api_key_and_says_when_it_is_refused(
    browser: Browser, site: Site
) -> None:
    browser.expect_console(failed_request("", 401))  # provoked on purpose below
    # The page and its assets are public; the data behind them is not.
    assert httpx.get(f"{site.server.url}/").status_code == 200
    assert httpx.get(f"{site.server.url}/web/app.js").status_code == 200
    assert httpx.get(f"{site.server.url}/api/tasks").status_code == 401

    browser.driver.get(f"{site.server.url}/web/style.css")
    browser.js("sessionStorage.clear()")
    browser.open()
    browser.visible("#key-input").send_keys("not-the-key", Keys.ENTER)
    browser.has_text("#key-dialog-error", "refused that key")
    # No key accepted yet: no role to show.
    assert not browser.find("#key-role").is_displayed()
    browser.screenshot("01-api-key")
    browser.visible("#key-input").send_keys(API_KEY, Keys.ENTER)
    browser.until(lambda: not browser.find("#key-dialog").is_displayed())
    browser.has_text("#key-state", "API key in use")
    # The bootstrap key is the admin credential; the page says so (GET /api/whoami).
    browser.has_text("#key-role", "admin · admin")
    browser.has_text("#board-updated", "Updated")
    assert browser.js("return sessionStorage.getItem('tachograph-key')") == API_KEY

    # Forgetting the key asks again; declining leaves a way back in.
    browser.find("#forget-key").click()
    browser.visible("#key-input")
    browser.find("#key-dismiss").click()
    browser.has_text("#board-error", "needs an API key")
    browser.find("#enter-key").click()
    browser.visible("#key-input").send_keys(API_KEY, Keys.ENTER)
    browser.has_text("#key-state", "API key in use")
    assert browser.console_errors() == []


def test_board_moves_cards_in_place_as_the_api_changes_tasks(page: Browser, site: Site) -> None:
    api = site.api
    page.js("performance.setResourceTimingBufferSize(100000); performance.clearResourceTimings()")
    page.has_text("#board-updated", "Updated")

    task_id = api.task(SLEEPER)
    page.until(lambda: column(page, task_id) == "running", message="card never ran")
    card = page.find(f"[data-task-id='{task_id}']")
    assert "attempt 1/3" in card.text

    api.post(f"/api/tasks/{task_id}/cancel")
    page.until(lambda: column(page, task_id) == "cancelled", message="card never cancelled")
    api.post(f"/api/tasks/{task_id}/resolve", {"summary": "Finished the refactor by hand."})
    page.until(lambda: column(page, task_id) == "completed", message="card never completed")
    # The same element moved between columns: refreshed in place, never rebuilt.
    assert card.get_attribute("data-status") == "completed"

    failing = api.task(
        {"lines": ["trying"], "stderr": "provider unavailable", "exit": 3}, maxAttempts=1
    )
    page.until(lambda: column(page, failing) == "failed", message="card never failed")
    remediation = wait_until(lambda: api.get(f"/api/tasks/{failing}")["remediationTaskId"])
    page.until(lambda: column(page, remediation) is not None, message="no remediation card")
    assert "remediation" in page.find(f"[data-task-id='{remediation}']").text
    assert "error: " in page.find(f"[data-task-id='{failing}']").text
    busy = api.task(SLEEPER)
    page.until(lambda: column(page, busy) == "running")
    page.screenshot("02-task-board")
    api.post(f"/api/tasks/{busy}/cancel")

    # The live stream moves the card, with no list read; the board only ever reads the
    # list (on entry, and when the stream starts), never a task's activity.
    def task_reads() -> list[str]:
        urls: list[str] = page.js(
            "return performance.getEntriesByType('resource').map(e => e.name)"
        )
        return [urlsplit(u).path for u in urls if "/api/tasks" in u]

    listed = len(task_reads())
    page.until(lambda: column(page, busy) == "cancelled", message="card never cancelled")
    assert len(task_reads()) == listed
    assert card.get_attribute("data-status") == "completed"
    assert set(task_reads()) <= {"/api/tasks"}, "the board must never read a task's activity"
    assert page.console_errors() == []


def test_task_detail_shows_activity_lineage_and_resolves_and_deletes(
    page: Browser, site: Site
) -> None:
    api = site.api
    failing = api.task(
        {"lines": ["step one", "step two"], "stderr": "tool crashed", "exit": 2}, maxAttempts=1
    )
    remediation = wait_until(lambda: api.get(f"/api/tasks/{failing}")["remediationTaskId"])
    page.until(lambda: column(page, failing) == "failed")

    # Keyboard only: Tab to the card, Enter opens the detail.
    tab_until(page, f"[data-task-id='{failing}'] a")
    ActionChains(page.driver).send_keys(Keys.ENTER).perform()
    page.has_text("#task-title", failing[:8])
    page.has_text("#task-status", "failed")
    page.has_text("#task-result", "tool crashed")
    page.has_text("#task-activity", "step two")
    page.has_text("#task-activity", "Attempt 1")
    assert not page.find("#task-cancel").is_enabled()
    assert page.find("#task-resolve").is_enabled()
    page.screenshot("03-task-detail")

    # Lineage both ways: parent → remediation → parent.
    page.find(f"#task-fields a[href='#tasks/{remediation}']").click()
    page.has_text("#task-title", remediation[:8])
    page.visible(f"#task-fields a[href='#tasks/{failing}']").click()
    page.has_text("#task-title", failing[:8])

    # Resolve needs a summary, then a confirmation.
    page.find("#task-resolve").click()
    page.has_text("#task-action-error", "summary")
    page.find("#task-summary").send_keys("The tool crash was a flaky runner; rerun by hand.")
    assert confirm(page, "#task-resolve") == "Resolve this task?"
    page.has_text("#task-status", "completed")
    page.has_text("#task-result", "flaky runner")
    assert api.task_status(failing) == "completed"

    # Delete: declining changes nothing; confirming removes it and returns to the board.
    confirm(page, "#task-delete", answer="#confirm-no")
    assert api.task_status(failing) == "completed"
    assert confirm(page, "#task-delete") == "Delete this task?"
    page.until(lambda: page.js("return location.hash") == "#tasks")
    page.has_text("#board-done", "deleted")
    assert api.http.get(f"/api/tasks/{failing}").status_code == 404
    page.until(lambda: column(page, failing) is None)
    assert page.console_errors() == []


def test_cancel_from_the_page_and_a_refused_cancel_shows_the_api_message(
    page: Browser, site: Site
) -> None:
    page.expect_console(failed_request("/cancel", 409))  # provoked on purpose below
    api = site.api
    running = api.task(SLEEPER)
    api.wait_status(running, "running")
    page.go(f"tasks/{running}")
    page.has_text("#task-status", "running")
    page.until(lambda: page.find("#task-cancel").is_enabled())
    page.find("#task-cancel").click()
    page.visible("#confirm-dialog")
    page.screenshot("04-confirm-cancel")
    page.find("#confirm-yes").click()
    page.has_text("#task-action-done", running[:8])
    page.has_text("#task-status", "cancelled")
    assert api.task_status(running) == "cancelled"

    # Another operator cancels first, while this page's confirmation is still open.
    other = api.task(SLEEPER)
    api.wait_status(other, "running")
    page.go(f"tasks/{other}")
    page.has_text("#task-status", "running")
    page.until(lambda: page.find("#task-cancel").is_enabled())
    page.find("#task-cancel").click()
    page.visible("#confirm-dialog")
    api.post(f"/api/tasks/{other}/cancel")
    api.wait_status(other, "cancelled")
    refusal = api.http.post(f"/api/tasks/{other}/cancel")
    assert refusal.status_code == 409
    page.find("#confirm-yes").click()
    shown = page.has_text("#task-action-error", refusal.json()["message"])
    assert refusal.json()["error"] in shown
    assert page.find("#task-action-error").get_attribute("role") == "alert"
    page.has_text("#task-status", "cancelled")
    page.screenshot("05-refused-cancel")


def hook_events(prompt: str) -> list[dict[str, Any]]:
    return [
        {
            "event": "UserPromptSubmit",
            "turnId": "turn-1",
            "agent": "claude-code",
            "agentSessionId": "web-demo",
            "prompt": f"{prompt}\nwith details",
        },
        {
            "event": "PreToolUse",
            "turnId": "turn-1",
            "toolName": "Bash",
            "toolInput": {"command": "rm -rf build"},
        },
        {
            "event": "PreToolUse",
            "turnId": "turn-1",
            "toolName": "Read",
            "toolInput": {"file_path": "README.md"},
        },
        {
            "event": "Stop",
            "turnId": "turn-1",
            "lastAssistantMessage": "The login test now waits for the session cookie.",
        },
        {"event": "UserPromptSubmit", "turnId": "turn-2", "prompt": "Also update the changelog"},
        {"event": "Notification", "turnId": "turn-2", "detail": {"message": "needs approval"}},
    ]


def test_sessions_filter_by_workspace_and_expand_a_hook_timeline(page: Browser, site: Site) -> None:
    api = site.api
    (site.root / "web-team").mkdir()
    api.post("/api/workspaces", {"id": "web-team", "path": "web-team"}, 201)
    elsewhere = api.post("/api/sessions", {"workspaceId": "default", "title": "Elsewhere"}, 201)
    sid = api.post("/api/sessions", {"workspaceId": "web-team"}, 201)["id"]
    for event in hook_events("Fix the flaky login test"):
        api.post(f"/api/sessions/{sid}/events", event)
    wait_until(lambda: api.get(f"/api/sessions/{sid}")["status"] == "waiting")

    page.go("sessions")
    page.until(lambda: page.find_all("#sessions-workspace option[value='web-team']"))
    Select(page.find("#sessions-workspace")).select_by_value("web-team")
    rows = "[...document.querySelectorAll('#sessions-rows tr')].map(r => r.dataset.sessionId)"
    page.until(lambda: page.js(f"return {rows}") == [sid], message="filter not applied")
    row = page.find(f"tr[data-session-id='{sid}']")
    for shown in (
        "Fix the flaky login test",
        "waiting",
        "claude-code",
        "web-team",
        "waits for the session cookie",
    ):
        assert shown in row.text
    Select(page.find("#sessions-workspace")).select_by_value("")
    page.until(lambda: elsewhere["id"] in page.js(f"return {rows}"))
    page.screenshot("06-sessions")

    page.find(f"tr[data-session-id='{sid}'] td a").click()
    page.has_text("#session-title", "Fix the flaky login test")
    page.has_text("#session-fields", "web-demo")
    turn = page.visible("#timeline details.turn[data-turn='turn-1']")
    assert turn.get_attribute("open") is None, "turns start collapsed"
    summary = turn.find_element(By.TAG_NAME, "summary")
    # The audit-log handler failed (open) on both tool calls; the policy denied Bash.
    assert "deny" in summary.text and "2 failures" in summary.text
    summary.send_keys(Keys.ENTER)  # keyboard: Enter on the focused summary expands
    page.until(lambda: turn.get_attribute("open") is not None)

    records = api.get(f"/api/sessions/{sid}/hooks")["items"]
    audit = next(r for r in records if r["handlerId"] == "audit-log" and r["failure"])
    table = turn.find_element(By.TAG_NAME, "table").text
    assert "tool-policy" in table and "Bash is not allowed in this workspace." in table
    assert "deny" in table and audit["failure"] in table
    assert f"{audit['durationMs']} ms" in table
    page.screenshot("07-hook-timeline")

    summary.send_keys(Keys.ENTER)
    page.until(lambda: turn.get_attribute("open") is None)
    page.find("#timeline-expand").click()
    page.until(
        lambda: all(
            t.get_attribute("open") is not None for t in page.find_all("#timeline details.turn")
        )
    )
    assert page.console_errors() == []


def test_audit_view_and_stream_links(page: Browser, site: Site) -> None:
    api = site.api
    page.go("audit")
    page.has_text("#verify-result", "Log verified")
    # The fixture's first server run stopped cleanly, so a signed checkpoint exists.
    (latest,) = api.get("/api/log/checkpoints", limit=1)["items"]
    page.has_text("#checkpoint", f"Position{latest['position']}")
    page.has_text("#checkpoint", latest["signatureState"])
    page.has_text("#verify-result", "1 signed")
    page.has_text("#health", "task_activity")
    page.screenshot("08-audit")

    task_id = api.task("Write the release notes")
    api.wait_status(task_id, "completed")
    page.go(f"tasks/{task_id}")
    page.has_text("#task-status", "completed")
    page.find(f"#task-fields a[href='#stream/{task_id}']").click()
    page.has_text("#stream-title", f"Task {task_id}")
    page.has_text("#stream-rows", "Task.Created")
    page.has_text("#stream-rows", "Task.Completed")
    page.screenshot("09-stream")
    page.find("#stream-back").click()
    page.has_text("#task-title", task_id[:8])

    # The lookup form opens any aggregate's stream, e.g. the task's session.
    session_id = api.get(f"/api/tasks/{task_id}")["sessionId"]
    page.go("audit")
    page.visible("#stream-id").send_keys(session_id, Keys.ENTER)
    page.has_text("#stream-title", f"Session {session_id}")
    page.has_text("#stream-rows", "Session.Created")

    # Sessions link to their stream from the list.
    page.go("sessions")
    page.visible(f"tr[data-session-id='{session_id}'] a[href='#stream/{session_id}']")
    assert page.console_errors() == []


LABEL_AUDIT = """
const problems = [];
const visible = (e) => !!(e.offsetWidth || e.offsetHeight || e.getClientRects().length);
for (const e of document.querySelectorAll('input, select, textarea')) {
  if (!visible(e)) continue;
  const named = e.labels.length || e.getAttribute('aria-label')
    || e.getAttribute('aria-labelledby');
  if (!named) problems.push('unlabelled ' + e.outerHTML.slice(0, 80));
}
for (const e of document.querySelectorAll('button, a[href], summary')) {
  if (!visible(e)) continue;
  if (!(e.textContent.trim() || e.getAttribute('aria-label'))) {
    problems.push('nameless ' + e.outerHTML.slice(0, 80));
  }
  if (e.tabIndex < 0) problems.push('not focusable ' + e.outerHTML.slice(0, 80));
}
for (const e of document.querySelectorAll('[tabindex]')) {
  if (e.tabIndex > 0) problems.push('positive tabindex ' + e.outerHTML.slice(0, 80));
}
if (!document.querySelector('main h2:not([hidden])')) problems.push('no heading');
return problems;
"""


def test_every_view_labels_its_controls_for_assistive_technology(page: Browser, site: Site) -> None:
    task_id = site.api.task("Label audit")
    session_id = site.api.wait_status(task_id, "completed")["sessionId"]
    for fragment, view, heading in (
        ("tasks", "tasks", "Task board"),
        (f"tasks/{task_id}", "task", "Task"),
        ("sessions", "sessions", "Sessions"),
        (f"sessions/{session_id}", "session", "Task:"),
        ("autonomy", "autonomy", "Autonomy"),
        ("policy", "policy", "Policy"),
        ("audit", "audit", "Audit"),
        (f"stream/{task_id}", "stream", "Events of"),
    ):
        page.go(fragment)
        css = f"#view-{view} h2"
        page.has_text(css, heading)
        # Navigation moves focus to the view's heading for screen-reader users.

        def focused(selector: str = css) -> Any:
            return page.js("return document.activeElement.matches(arguments[0])", selector)

        page.until(focused)
        assert page.js(LABEL_AUDIT) == [], fragment
    assert page.js("return document.documentElement.lang") == "en"
    assert page.console_errors() == []


def test_autonomy_toggles_policy_ignores_a_signal_and_reverts_with_refusals(
    page: Browser, site: Site
) -> None:
    page.expect_console(failed_request("/revert", 409))  # provoked on purpose below
    api = site.api
    page.go("autonomy")
    page.until(lambda: page.find("#autonomy-settings").get_attribute("data-loaded"))
    page.find("#autonomy-settings input[name='evolution']").click()
    page.has_text("#settings-done", "evolution is now on")
    assert api.get("/api/settings/autonomy")["evolution"] is True

    def revisions() -> list[dict[str, Any]]:
        return api.get("/api/autonomy/revisions", agentId="web-agent")["items"]  # type: ignore[no-any-return]

    for n, goal in enumerate(("Fix the flaky login test", "Speed up the CI pipeline"), 1):
        api.post(
            "/api/autonomy/signals",
            {
                "agentId": "web-agent",
                "traceId": f"trace-{n}",
                "kind": "failure",
                "goal": goal,
                "failure": f"step {n} was skipped",
                "failureClass": "validation",
            },
            201,
        )

        def recorded(count: int = n) -> bool:
            return len(revisions()) == count

        wait_until(recorded)
    latest, older = (r["id"] for r in revisions())
    stuck = api.post(
        "/api/autonomy/signals",
        {
            "agentId": "web-agent",
            "traceId": "trace-3",
            "kind": "failure",
            "goal": f"This one {STUCK_GOAL}",
            "failure": "reflector down",
        },
        201,
    )["id"]
    wait_until(
        lambda: (
            (s := api.get(f"/api/autonomy/signals/{stuck}"))["attempts"] >= 1
            and s["status"] == "pending"
        )
    )

    page.find("#revisions-refresh").click()
    page.visible(f"button[data-revert='{latest}']")
    assert "latest" in page.find(f"[data-revision-id='{latest}']").text
    assert confirm(page, f"button[data-revert='{latest}']") == "Revert this revision?"
    page.has_text("#revisions-done", f"Revision {latest[:8]} reverted")
    compensation = next(r for r in revisions() if r["revertsRevisionId"] == latest)
    page.visible(f"[data-revision-id='{compensation['id']}']")
    assert (
        f"reverted by {compensation['id'][:8]}" in page.find(f"[data-revision-id='{latest}']").text
    )

    # Reverting the same revision again is refused: the page shows the API's reason.
    confirm(page, f"button[data-revert='{latest}']")
    refusal = api.http.post(f"/api/autonomy/revisions/{latest}/revert")
    assert refusal.status_code == 409 and refusal.json()["error"] == "already_reverted"
    shown = page.has_text("#revisions-error", refusal.json()["message"])
    assert "already_reverted" in shown
    # Focus returns to the button once the list is re-read (after the refusal is shown).
    page.until(
        lambda: page.js("return document.activeElement.dataset.revert") == latest,
        message="focus did not return to the revert button",
    )
    page.screenshot("10-autonomy-revisions")
    confirm(page, f"button[data-revert='{older}']")
    page.has_text("#revisions-error", "(not_latest)")
    assert len(revisions()) == 3, "refused reverts append nothing"

    # A signal the reflector could not handle waits in backoff; the operator ignores it.
    page.find("#signals-refresh").click()
    ignore = f"[data-signal-id='{stuck}'] button[data-action='ignore']"
    page.visible(ignore)
    page.has_text(f"[data-signal-id='{stuck}']", "503")
    page.screenshot("11-autonomy-signals")
    assert confirm(page, ignore) == "Ignore this signal?"
    page.has_text("#signals-done", "ignored")
    page.has_text(f"[data-signal-id='{stuck}']", "ignored")
    assert api.get(f"/api/autonomy/signals/{stuck}")["status"] == "ignored"
    assert page.console_errors() == []


def test_a_session_shows_what_the_agent_did_and_the_search_links_a_call(
    page: Browser, site: Site
) -> None:
    api = site.api
    sid = api.post("/api/sessions", {"workspaceId": "default"}, 201)["id"]
    events = hook_events("Clean the build")
    events[1]["toolCallId"] = "call-rm"
    events[2]["toolCallId"] = "call-read"
    events.insert(
        3,
        {
            "event": "PostToolUse",
            "turnId": "turn-1",
            "toolName": "Read",
            "toolCallId": "call-read",
            "toolInput": {"file_path": "README.md"},
            "toolResponse": "# readme",
            "durationMs": 12,
        },
    )
    for event in events:
        api.post(f"/api/sessions/{sid}/events", event)
    wait_until(lambda: len(api.get(f"/api/sessions/{sid}/timeline")["items"]) == 2)

    page.go(f"sessions/{sid}")
    newest = "#calls details.turn[data-turn='turn-2']"
    # The newest turn starts open (once the page has rendered it; under load, a moment later).
    page.until(lambda: page.visible(newest).get_attribute("open") is not None)
    first = page.find("#calls details.turn[data-turn='turn-1']")
    summary = first.find_element(By.TAG_NAME, "summary")
    assert "Clean the build" in summary.text
    assert "2 tool calls" in summary.text and "1 denial" in summary.text
    summary.send_keys(Keys.ENTER)
    page.until(lambda: first.get_attribute("open") is not None)
    denied = first.find_element(By.CSS_SELECTOR, "li.call.denied[data-call='call-rm']")
    assert "rm -rf build" in denied.text and "tool-policy" in denied.text
    assert "Bash is not allowed in this workspace." in denied.text
    read = first.find_element(By.CSS_SELECTOR, "li.call[data-call='call-read']")
    assert "README.md" in read.text and "ok" in read.text and "12 ms" in read.text
    assert "waits for the session cookie" in first.text
    page.screenshot("17-session-calls")

    page.go(f"activity?contains=rm+-rf&sessionId={sid}")
    row = page.visible("#activity-rows tr.denied")
    assert "rm -rf build" in row.text and "deny" in row.text
    assert page.js("return document.querySelector('#activity-form [name=contains]').value") == (
        "rm -rf"
    )
    assert len(page.find_all("#activity-rows tr")) == 1
    page.screenshot("18-activity-search")
    row.find_element(By.CSS_SELECTOR, "a").click()
    page.has_text("#session-fields", sid)
    page.go("activity")
    page.visible("#activity-form [name=tool]").send_keys("Read", Keys.ENTER)
    page.until(lambda: "tool=Read" in page.js("return location.hash"))
    page.until(lambda: "README.md" in page.text("#activity-rows"))
    assert page.console_errors() == []
