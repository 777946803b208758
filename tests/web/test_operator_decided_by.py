"""The operator page names who decided each call, allowed ones too (headless Chromium,
against a real `serve` holding risky Bash calls; see tests/web/test_operator_approvals.py).

"What the agent did" on a session and the Activity rows say "allowed by key:admin
(approval rule risky-shell): release day", "denied by …" with the operator's reason, and
"allowed by default" for a call nothing objected to.
"""

from __future__ import annotations

import uuid

import pytest

from tests.support import Server
from tests.tasks.conftest import wait_until
from tests.test_approvals_api import pre_tool_use
from tests.web.browser import Browser
from tests.web.test_operator_approvals import (  # noqa: F401 - fixtures used by name
    ADMIN_KEY,
    Desk,
    chromium,
    desk,
)

pytestmark = pytest.mark.slow


def open_page(browser: Browser, server: Server, fragment: str) -> Browser:
    browser.driver.get(f"{server.url}/web/style.css")
    browser.js("sessionStorage.clear()")
    browser.js("sessionStorage.setItem('tachograph-key', arguments[0])", ADMIN_KEY)
    browser.open(fragment)
    return browser


def decide(held_by: Desk, approval_id: str, decision: str, reason: str) -> None:
    decided = held_by.http.post(
        f"/api/approvals/{approval_id}/decide", json={"decision": decision, "reason": reason}
    )
    assert decided.status_code == 200, decided.text


def test_allowed_and_denied_calls_show_who_decided_them(
    chromium: Browser,  # noqa: F811 - the approvals page's module fixture, by name
    desk: Desk,  # noqa: F811
) -> None:
    native = str(uuid.uuid4())
    held, allowed = desk.hold("git push origin main", native)
    decide(desk, allowed["id"], "allow", "release day")
    assert held.result().json() == {}
    held, refused = desk.hold("terraform apply -auto-approve", native)
    decide(desk, refused["id"], "deny", "not on a Friday")
    assert held.result().json()["hookSpecificOutput"]["permissionDecision"] == "deny"
    plain = pre_tool_use(native, "ls -la", "toolu_plain")
    answered = desk.http.post("/hooks/claude", json=plain, headers=desk.agent)
    assert answered.status_code == 200 and answered.json() == {}
    session = allowed["sessionId"]
    position = answered.headers["x-tachograph-position"]
    wait_until(
        lambda: (
            len(
                desk.http.get(
                    "/api/activity", params={"sessionId": session, "minPosition": position}
                ).json()["items"]
            )
            == 3
        )
    )
    allow_text = "allowed by key:admin (approval rule risky-shell): release day"
    deny_text = "denied by key:admin (approval rule risky-shell): not on a Friday"

    page = open_page(chromium, desk.server, f"sessions/{session}")
    calls = "#calls li.call"
    page.until(lambda: len(page.find_all(calls)) == 3, message="the session's calls never showed")
    by_call = {
        call.get_attribute("data-call"): call.find_element("css selector", ".decided-by")
        for call in page.find_all(calls)
    }
    assert by_call["toolu_plain"].text == "allowed by default: no rule or handler objected"
    notes = sorted(note.text for note in by_call.values())
    assert allow_text in notes and deny_text in notes
    kinds = {note.get_attribute("data-decided-by") for note in by_call.values()}
    assert kinds == {"operator", "none"}
    page.screenshot("decided-by-session-calls")

    page.go(f"activity?sessionId={session}")
    page.until(lambda: len(page.find_all("#activity-rows tr[data-position]")) == 3)
    rows = page.text("#activity-rows")
    assert allow_text in rows and deny_text in rows and "allowed by default" in rows
    page.screenshot("decided-by-activity")
    assert page.console_errors() == []
