"""The operator page's Approvals view in headless Chromium, against a real `serve`.

A Claude Code PreToolUse hook is held by a `TACHOGRAPH_APPROVALS` rule on its own thread;
the pending request appears on the page from the live stream (no reload), is decided
there, and the held hook is answered. Like the other web tests this runs on SQLite: the
approvals API under it is tested on both stores in tests/test_approvals_api.py.
"""

from __future__ import annotations

import json
import signal
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from infra.settings import Settings
from tests.support import Server
from tests.tasks.conftest import wait_until
from tests.test_approvals_api import Held, issue, pre_tool_use
from tests.web.browser import Browser, failed_request
from tests.web.test_operator_page import LABEL_AUDIT

pytestmark = pytest.mark.slow

ADMIN_KEY = "web-approvals-admin-key"
RULES = {
    "version": 1,
    "rules": [
        {
            "id": "risky-shell",
            "tool": "Bash",
            "match": "git push|terraform apply|onerror|rm -rf",
            "timeoutS": 300,
        },
        {"id": "short-fuse", "tool": "Bash", "match": "^sleepy-deploy", "timeoutS": 2},
    ],
}
# Set on the loaded page: a reload would drop it.
MARK = "window.__notReloaded = true"
STILL_MARKED = "return window.__notReloaded === true"
READER_CANNOT = "Your key has the reader role; deciding approvals needs operator."


@dataclass
class Desk:
    """A `serve` holding risky Bash calls, its admin client and an agent token."""

    server: Server
    http: httpx.Client
    agent: dict[str, str]

    def hold(self, command: str, session: str | None = None) -> tuple[Held, dict[str, Any]]:
        """Send a PreToolUse for `command` that the rule holds; answer it and its approval."""
        body = pre_tool_use(session or str(uuid.uuid4()), command)
        held = Held(
            lambda: self.http.post("/hooks/claude", json=body, headers=self.agent, timeout=120)
        )
        approval = wait_until(lambda: self.pending_for(command), timeout=15, every=0.05)
        return held, approval

    def pending_for(self, command: str) -> dict[str, Any] | None:
        items = self.http.get("/api/approvals", params={"status": "pending"}).json()["items"]
        return next((a for a in items if a["inputSummary"] == command), None)

    def decide(self, approval_id: str, decision: str, headers: dict[str, str] | None = None) -> Any:
        decided = self.http.post(
            f"/api/approvals/{approval_id}/decide", json={"decision": decision}, headers=headers
        )
        assert decided.status_code == 200, decided.text
        return decided.json()


@pytest.fixture(scope="module")
def desk(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Desk]:
    base = tmp_path_factory.mktemp("web-approvals")
    (base / "workspace").mkdir()
    settings = Settings(
        data_dir=base / "data", workspace_root=base / "workspace", api_key=ADMIN_KEY
    )
    env = {"TACHOGRAPH_APPROVALS": json.dumps(RULES)}
    server = Server(settings, base / "serve.log", env)
    admin = {"x-tachograph-key": ADMIN_KEY}
    try:
        server.wait_ready(headers=admin)
        with httpx.Client(base_url=server.url, headers=admin, timeout=30) as http:
            yield Desk(server, http, issue(http, role="agent", workspaceId="default"))
    finally:
        if server.popen.poll() is None:
            server.signal(signal.SIGTERM)
        try:
            server.wait(30)
        finally:
            server.kill()


@pytest.fixture(scope="module")
def chromium(desk: Desk) -> Iterator[Browser]:
    opened = Browser(desk.server.url)
    try:
        yield opened
    finally:
        opened.close()


def open_approvals(browser: Browser, desk: Desk, key: str) -> Browser:
    """A fresh load of #approvals with `key` in this tab's session, following the stream."""
    browser.driver.get(f"{desk.server.url}/web/style.css")
    browser.js("sessionStorage.clear()")
    browser.js("sessionStorage.setItem('tachograph-key', arguments[0])", key)
    browser.open("approvals")
    browser.has_text("#live-state", "Live")
    browser.has_text("#approvals-updated", "Updated")
    browser.js(MARK)
    return browser


def item(approval_id: str) -> str:
    return f"#approvals-pending li[data-approval-id='{approval_id}']"


def settled(approval_id: str) -> str:
    return f"#approvals-settled tr[data-approval-id='{approval_id}']"


def gone(page: Browser, css: str) -> bool:
    return not page.find_all(css)


def test_a_pending_call_appears_live_is_allowed_from_the_page_and_the_agent_proceeds(
    chromium: Browser, desk: Desk
) -> None:
    page = open_approvals(chromium, desk, ADMIN_KEY)
    page.has_text("#key-role", "admin")
    assert not page.find("#approvals-badge").is_displayed()
    session = str(uuid.uuid4())
    held, approval = desk.hold("git push origin main", session)

    # From the stream alone: no reload, and the command is shown without a click.
    row = page.visible(item(approval["id"]))
    assert row.find_element("css selector", "code.what").text == "git push origin main"
    shown = row.text
    assert "Bash" in shown and "claude-code" in shown and "risky-shell" in shown
    link = row.find_element("css selector", f"a[href='#sessions/{approval['sessionId']}']")
    # A session without a title yet (no prompt, no rename) is named by its short id.
    assert link.text == f"Session {approval['sessionId'][:8]}"
    page.until(lambda: " s; then denied" in page.text(f"{item(approval['id'])} .countdown"))
    first = page.text(f"{item(approval['id'])} .countdown")
    page.until(lambda: page.text(f"{item(approval['id'])} .countdown") != first, timeout=5)
    page.has_text("#approvals-badge", "1 approval pending")
    assert page.find("#approvals-badge").is_displayed()
    assert held.response is None  # the agent still waits
    page.screenshot("19-approvals-pending")
    assert page.js(LABEL_AUDIT) == []

    page.find(f"{item(approval['id'])} input[data-reason]").send_keys("release day")
    page.find(f"{item(approval['id'])} button[data-decide='allow']").click()
    answered = held.result()
    assert answered.status_code == 200 and answered.json() == {}  # the agent proceeds
    page.until(lambda: gone(page, item(approval["id"])), message="the row never left pending")
    decided = page.visible(settled(approval["id"]))
    assert "key:admin" in decided.text and "release day" in decided.text
    assert "allow" in decided.text
    page.has_text("#approvals-done", "Allowed: Bash git push origin main")
    page.until(lambda: not page.find("#approvals-badge").is_displayed())
    recorded = desk.http.get(f"/api/approvals/{approval['id']}").json()
    assert (recorded["decidedBy"], recorded["reason"]) == ("key:admin", "release day")

    # A second call, denied from the page: the agent is told the typed reason. Its
    # session now has a title, and the row names the session by it (from the stream).
    renamed = desk.http.patch(
        f"/api/sessions/{approval['sessionId']}", json={"title": "Ship the release"}
    )
    assert renamed.status_code == 200, renamed.text
    held, second = desk.hold("terraform apply -auto-approve", session)
    page.visible(item(second["id"]))
    titled = page.find(f"{item(second['id'])} a[href='#sessions/{approval['sessionId']}']")
    assert titled.text == "Ship the release"
    page.has_text("#approvals-badge", "1 approval pending")
    page.find(f"{item(second['id'])} input[data-reason]").send_keys("not on a Friday")
    page.find(f"{item(second['id'])} button[data-decide='deny']").click()
    output = held.result().json()["hookSpecificOutput"]
    assert output["permissionDecision"] == "deny"
    assert "not on a Friday" in output["permissionDecisionReason"]
    denied = page.visible(settled(second["id"]))
    assert "deny" in denied.text and "not on a Friday" in denied.text
    # Newest decision first.
    rows = "#approvals-settled tr"
    order = page.js(
        "return [...document.querySelectorAll(arguments[0])].map(r => r.dataset.approvalId)", rows
    )
    assert order[:2] == [second["id"], approval["id"]]
    page.screenshot("20-approvals-decided")
    assert page.js(STILL_MARKED)
    assert page.console_errors() == []


def test_an_input_summary_is_shown_as_text_and_allow_for_session_covers_later_calls(
    chromium: Browser, desk: Desk
) -> None:
    page = open_approvals(chromium, desk, ADMIN_KEY)
    page.js("window.__alerted = []; window.alert = (m) => window.__alerted.push(m)")
    command = "echo '<img src=x onerror=alert(1)>' > note.html"
    session = str(uuid.uuid4())
    held, approval = desk.hold(command, session)
    assert "<img" in approval["inputSummary"]

    page.visible(item(approval["id"]))
    code = page.find(f"{item(approval['id'])} code.what")
    assert code.text == approval["inputSummary"]
    assert page.find_all("#view-approvals img") == []
    assert page.js("return document.images.length") == 0

    page.find(f"{item(approval['id'])} button[data-decide='session']").click()
    assert held.result().json() == {}
    row = page.visible(settled(approval["id"]))
    assert "for the session" in row.text
    assert row.find_element("css selector", "code.what").text == approval["inputSummary"]
    assert page.find_all("#view-approvals img") == []
    # Allowed for the session: the next Bash call there is not held, nor listed.
    later = desk.http.post(
        "/hooks/claude", json=pre_tool_use(session, "rm -rf build"), headers=desk.agent
    )
    assert later.status_code == 200 and later.json() == {}
    assert desk.pending_for("rm -rf build") is None
    assert page.js("return window.__alerted") == []
    assert page.console_errors() == []


def test_a_call_nobody_decides_moves_to_expired_by_system(chromium: Browser, desk: Desk) -> None:
    page = open_approvals(chromium, desk, ADMIN_KEY)
    held, approval = desk.hold("sleepy-deploy production")
    answered = held.result()
    assert answered.json()["hookSpecificOutput"]["permissionDecision"] == "deny"
    row = page.visible(settled(approval["id"]))
    assert row.get_attribute("data-status") == "expired"
    assert "expired" in row.text and "system" in row.text and "deny" in row.text
    assert gone(page, item(approval["id"]))
    assert page.js(STILL_MARKED)
    assert page.console_errors() == []


def test_a_call_decided_elsewhere_shows_the_409_and_its_new_state(
    chromium: Browser, desk: Desk
) -> None:
    chromium.expect_console(failed_request("/decide", 409))  # provoked on purpose below
    page = open_approvals(chromium, desk, ADMIN_KEY)
    held, approval = desk.hold("git push --tags")
    page.visible(item(approval["id"]))
    # Stop following the stream, so the page still offers a decision another operator made.
    page.js("live.blocked = true; live.abort.abort()")
    page.until(lambda: page.js("return live.up") is False)
    otto = issue(desk.http, label="otto", role="operator")
    desk.decide(approval["id"], "deny", headers=otto)
    assert held.result().json()["hookSpecificOutput"]["permissionDecision"] == "deny"

    page.find(f"{item(approval['id'])} button[data-decide='allow']").click()
    page.has_text("#approvals-action-error", "Approval is decided")
    assert "invalid_state" in page.text("#approvals-action-error")
    # The row was read again: it moved to the settled list, saying who decided.
    page.until(lambda: gone(page, item(approval["id"])))
    row = page.visible(settled(approval["id"]))
    assert "key:otto" in row.text and "deny" in row.text
    page.js("liveRestart()")
    page.has_text("#live-state", "Live")
    assert page.console_errors() == []


def test_a_reader_sees_pending_calls_but_cannot_decide_them(chromium: Browser, desk: Desk) -> None:
    chromium.expect_console(failed_request("/decide", 403))  # forced on purpose below
    reader = issue(desk.http, label="rita", role="reader")
    held, approval = desk.hold("git push origin reader-watch")
    page = open_approvals(chromium, desk, reader["x-tachograph-key"])
    page.has_text("#key-role", "reader · rita")
    # Read on load, before any stream message names it.
    row = page.visible(item(approval["id"]))
    assert "git push origin reader-watch" in row.text
    page.has_text("#approvals-badge", "1 approval pending")
    for kind in ("allow", "deny", "session"):
        button = page.find(f"{item(approval['id'])} button[data-decide='{kind}']")
        assert not button.is_enabled() and button.get_attribute("title") == READER_CANNOT
    assert not page.find(f"{item(approval['id'])} input[data-reason]").is_enabled()
    assert page.find("#approvals-role-note").text == READER_CANNOT

    # Whatever gets through is refused by the server, and the page shows its message.
    allow = f"{item(approval['id'])} button[data-decide='allow']"
    page.js("document.querySelector(arguments[0]).disabled = false", allow)
    page.find(allow).click()
    refused = httpx.post(
        f"{desk.server.url}/api/approvals/{approval['id']}/decide",
        json={"decision": "allow"},
        headers=reader,
    )
    assert refused.status_code == 403
    page.has_text("#approvals-action-error", refused.json()["message"])
    page.until(lambda: not page.find(allow).is_enabled())
    assert held.response is None

    desk.decide(approval["id"], "allow")
    assert held.result().json() == {}
    page.until(lambda: gone(page, item(approval["id"])))
    assert "key:admin" in page.visible(settled(approval["id"])).text
    page.until(lambda: not page.find("#approvals-badge").is_displayed())
    # Reached from the navigation, the view puts focus on its heading.
    page.go("tasks")
    page.has_text("#board-updated", "Updated")
    page.find("a[data-nav='approvals']").click()
    page.until(lambda: page.js("return document.activeElement.id") == "approvals-title")
    assert page.js("return location.hash") == "#approvals"
    assert page.console_errors() == []


def test_a_call_whose_hook_gave_up_shows_abandoned_then_ran_while_awaiting_approval(
    chromium: Browser, desk: Desk
) -> None:
    """The runtime stopped waiting (its hook timed out) and ran the call anyway: the page
    says the request was abandoned and that the call ran undecided, never "denied"."""
    page = open_approvals(chromium, desk, ADMIN_KEY)
    native = str(uuid.uuid4())
    body = pre_tool_use(native, "rm -rf build")
    # The client gives up after 1 s, as a hook whose timeout is shorter than the hold.
    gave_up = Held(lambda: _gives_up(desk, body))
    approval = wait_until(lambda: desk.pending_for("rm -rf build"), timeout=15, every=0.05)
    gave_up.result()
    row = page.visible(settled(approval["id"]))
    wait_until(lambda: row.get_attribute("data-status") == "abandoned", timeout=15)
    assert "abandoned" in row.text
    assert gone(page, item(approval["id"]))

    post = {
        **body,
        "hook_event_name": "PostToolUse",
        "tool_response": {"stdout": "", "stderr": "", "interrupted": False},
    }
    ran = desk.http.post("/hooks/claude", json=post, headers=desk.agent)
    assert ran.status_code == 200, ran.text
    page.open(f"sessions/{approval['sessionId']}")
    status = page.visible(f"li.call[data-call='{body['tool_use_id']}'] [data-status]")
    wait_until(lambda: status.get_attribute("data-status") == "ran_undecided", timeout=15)
    assert status.text == "ran while awaiting approval"
    assert "denied" not in page.visible(f"li.call[data-call='{body['tool_use_id']}']").text
    assert page.console_errors() == []


def _gives_up(desk: Desk, body: dict[str, Any]) -> httpx.Response:
    try:
        return desk.http.post("/hooks/claude", json=body, headers=desk.agent, timeout=1)
    except httpx.TimeoutException:
        return httpx.Response(599)  # what a runtime sees: no answer
