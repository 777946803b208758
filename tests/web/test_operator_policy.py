"""The operator page's Policy view (docs/policy.md), in headless Chromium against a real
`serve` (tests/web/conftest.py): the active document of each scope, the revisions with
what each changed, the calls shadow rules would have decided (posted as real Claude Code
hook bodies with an agent token), recording and activating a candidate (a bad rule named,
nothing recorded), rollback behind a confirmation, and a reader who sees but cannot
change. The tests share one server, so each reads the revision numbers it expects from
the API rather than assuming it ran first.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support.select import Select

from tests.tasks.conftest import wait_until
from tests.test_approvals_api import pre_tool_use
from tests.web.browser import Browser, failed_request
from tests.web.conftest import API_KEY, Site
from tests.web.test_operator_roles import disabled_because, load_with, mint, note

pytestmark = pytest.mark.slow

FIRST = """version: 1
rules:
  - id: no-download-to-shell
    when: >-
      command.hosts.size() > 0
        && command.commands.exists(c, c.program in ["sh", "bash", "zsh"])
    then: deny
    reason: Piping a download into a shell runs code nobody reviewed."""

SHADOW_RULE = """
  - id: env-files
    when: paths.exists(p, p.endsWith("/.env"))
    then: deny
    mode: shadow"""

CHANGES = "testing and changing policy"
ACTIVATES = "activating and rolling back policy"


def global_revisions(site: Site) -> list[dict[str, Any]]:
    return list(site.api.get("/api/policy/revisions")["items"])


def active_global(site: Site) -> dict[str, Any] | None:
    items = [r for r in site.api.get("/api/policy")["items"] if r["workspaceId"] is None]
    return items[0] if items else None


def write(page: Browser, text: str) -> None:
    """Type `text` over the editor's content, as an operator would."""
    editor = page.find("#policy-source")
    editor.send_keys(Keys.CONTROL, "a")
    editor.send_keys(Keys.DELETE)
    editor.send_keys(text)


def confirm(page: Browser, yes: bool = True) -> str:
    """Answer the confirmation dialog; its question."""
    page.visible("#confirm-dialog")
    question = page.text("#confirm-title")
    page.find("#confirm-yes" if yes else "#confirm-no").click()
    page.until(lambda: not page.find("#confirm-dialog").is_displayed())
    return question


def apply(page: Browser, text: str) -> None:
    write(page, text)
    page.find("#policy-apply").click()
    assert "Record and activate" in confirm(page)


def policy_page(page: Browser, site: Site, key: str = API_KEY) -> Browser:
    load_with(page, site, key, "policy")
    page.has_text("#policy-updated", "Updated")
    return page


def test_an_operator_records_and_activates_a_document_a_bad_rule_named_and_nothing_recorded(
    browser: Browser, site: Site
) -> None:
    browser.expect_console(failed_request("/api/policy/revisions", 422))  # the typo below
    operator = mint(site, "operator", "olive")
    page = policy_page(browser, site, operator)
    # Nothing active yet: the view says what a document is for and offers a first rule,
    # one the server accepts as it stands.
    guide = page.has_text("#policy-active .guide", "No policy is active")
    starter = page.find("#policy-active .guide code").text
    assert "version: 1" in guide and starter.startswith("version: 1")
    site.api.post("/api/policy/revisions", {"source": starter}, 201)
    before = global_revisions(site)

    apply(page, "version: 1\nrules:\n  - {id: typo, when: 'toool == \"Bash\"', then: deny}")
    refused = page.has_text("#policy-editor-error", "Rule typo:")
    assert "toool" in refused
    assert global_revisions(site) == before

    apply(page, FIRST)
    done = page.has_text("#policy-editor-done", "is recorded and active for the global scope")
    active = active_global(site)
    assert active is not None and active["source"] == FIRST and active["actor"] == "key:olive"
    assert f"Revision {active['number']} " in done
    page.has_text(f"#policy-active [data-revision-id='{active['id']}']", "no-download-to-shell")
    # The editor now starts from the active document.
    page.until(lambda: page.find("#policy-source").get_attribute("value") == FIRST)

    apply(page, FIRST + SHADOW_RULE)
    page.has_text("#policy-editor-done", f"Revision {active['number'] + 1} is recorded and active")
    newest = active_global(site)
    assert newest is not None and newest["number"] == active["number"] + 1
    item = f"#policy-revisions li[data-revision-id='{newest['id']}']"
    page.has_text(item, "active")
    page.find(f"{item} summary").click()
    diff = page.has_text(f"{item} .policy-diff", f"Changes from revision {active['number']}")
    assert "+4 −0" in diff
    added = [line.text for line in page.find_all(f"{item} .policy-diff [data-kind='add']")]
    assert added == ["+   - id: env-files", '+     when: paths.exists(p, p.endsWith("/.env"))',
                     "+     then: deny", "+     mode: shadow"]  # fmt: skip
    assert not page.find_all(f"{item} .policy-diff [data-kind='del']")
    page.screenshot("policy-revisions")
    assert page.console_errors() == []


def test_a_rollback_asks_first_then_makes_the_earlier_revision_active(
    browser: Browser, site: Site
) -> None:
    site.api.post("/api/policy/revisions", {"source": FIRST}, 201)
    newer = site.api.post("/api/policy/revisions", {"source": FIRST + SHADOW_RULE}, 201)
    site.api.post(f"/api/policy/revisions/{newer['id']}/activate")
    earlier = next(r for r in global_revisions(site) if r["number"] == newer["number"] - 1)
    page = policy_page(browser, site)
    button = f"button[data-policy-action='rollback'][data-revision-id='{earlier['id']}']"
    page.visible(button).click()
    assert confirm(page, yes=False) == (
        f"Roll back the global policy to revision {earlier['number']}?"
    )
    assert active_global(site)["id"] == newer["id"]  # type: ignore[index]

    page.find(button).click()
    confirm(page)
    page.has_text("#policy-action-done", f"Revision {earlier['number']} is now the active")
    assert active_global(site)["id"] == earlier["id"]  # type: ignore[index]
    page.has_text(
        "#policy-history",
        f"rolled back to revision {earlier['number']} (from revision {newer['number']})",
    )
    # The newer revision is offered again, as an activation.
    page.visible(f"button[data-policy-action='activate'][data-revision-id='{newer['id']}']")
    assert page.console_errors() == []


def test_a_call_a_shadow_rule_would_have_denied_is_listed_while_it_ran(
    browser: Browser, site: Site
) -> None:
    revision = site.api.post("/api/policy/revisions", {"source": FIRST + SHADOW_RULE}, 201)
    site.api.post(f"/api/policy/revisions/{revision['id']}/activate")
    agent = {"x-tachograph-key": mint(site, "agent", None, workspaceId="default")}
    page = policy_page(browser, site)

    body = pre_tool_use(str(uuid.uuid4()), "")
    body["tool_name"], body["tool_input"] = "Read", {"file_path": "/home/dev/repo/.env"}
    answered = site.api.http.post("/hooks/claude", json=body, headers=agent)
    assert answered.status_code == 200 and answered.json() == {}  # the call ran
    row = f"#policy-shadow-rows tr[data-position='{answered.headers['x-tachograph-position']}']"
    text = page.has_text(row, "env-files", timeout=15)
    assert "/home/dev/repo/.env" in text and f"revision {revision['number']}" in text
    assert [b.text for b in page.find_all(f"{row} .badge")] == ["deny", "pass"]
    page.js("document.querySelector(arguments[0]).scrollIntoView()", "#policy-shadow-title")
    page.screenshot("policy-shadow-hits")
    # The rule opens the Activity view filtered to every call it decided or would have.
    page.find(f"{row} a[href^='#activity']").click()
    page.until(lambda: page.find("#activity-form input[name='ruleId']").get_attribute("value"))
    assert page.find("#activity-form input[name='ruleId']").get_attribute("value") == "env-files"
    found = page.has_text(
        f"#activity-rows tr[data-position='{answered.headers['x-tachograph-position']}']",
        "shadow rule env-files would have: deny",
    )
    assert "/home/dev/repo/.env" in found
    # And the session's calls say it too.
    page.find(
        f"#activity-rows tr[data-position='{answered.headers['x-tachograph-position']}'] a"
    ).click()
    page.has_text("#calls", "shadow rule env-files would have: deny")
    assert page.console_errors() == []


def test_a_reader_sees_the_policy_but_every_change_is_disabled_with_the_reason(
    browser: Browser, site: Site
) -> None:
    first = site.api.post("/api/policy/revisions", {"source": FIRST}, 201)
    second = site.api.post("/api/policy/revisions", {"source": FIRST + SHADOW_RULE}, 201)
    site.api.post(f"/api/policy/revisions/{second['id']}/activate")
    page = policy_page(browser, site, mint(site, "reader", "rita"))
    page.has_text(f"#policy-active [data-revision-id='{second['id']}']", "env-files")
    why = f"Your key has the reader role; {CHANGES} needs operator."
    for control in ("#policy-source", "#policy-apply", "#policy-backtest", "#policy-reset"):
        disabled_because(page, control, why)
    assert note(page, "#policy-editor-role-note") == why
    disabled_because(
        page,
        f"button[data-policy-action='rollback'][data-revision-id='{first['id']}']",
        f"Your key has the reader role; {ACTIVATES} needs operator.",
    )
    assert note(page, "#policy-revisions-role-note").endswith(f"{ACTIVATES} needs operator.")
    # The source stays readable in full, and the diff with it.
    page.has_text("#policy-active", 'p.endsWith("/.env")')
    wait_until(lambda: page.find("#policy-source").get_attribute("value") == FIRST + SHADOW_RULE)
    assert page.console_errors() == []


def test_a_workspace_gets_its_own_document_beside_the_global_one(
    browser: Browser, site: Site
) -> None:
    page = policy_page(browser, site)
    Select(page.find("#policy-scope")).select_by_value("default")
    # No document judges this workspace yet: the editor starts empty, the list says so.
    page.until(lambda: page.find("#policy-source").get_attribute("value") == "")
    page.visible("#policy-revisions-empty")
    workspace_rule = FIRST.replace("no-download-to-shell", "no-download-here")
    apply(page, workspace_rule)
    page.has_text("#policy-editor-done", "is recorded and active for the workspace default scope")
    (mine,) = site.api.get("/api/policy/revisions", workspaceId="default")["items"]
    assert mine["active"] and mine["source"] == workspace_rule
    page.has_text("#policy-active [data-scope='default']", "no-download-here")
    page.has_text(f"#policy-revisions li[data-revision-id='{mine['id']}']", "active")
    assert page.text("#policy-revisions").count("Revision ") == 1

    # A changed line is one line removed and one added, the rest folded as unchanged.
    reworded = workspace_rule.replace("nobody reviewed.", "nobody here reviewed.")
    apply(page, reworded)
    page.has_text("#policy-editor-done", "Revision 2 is recorded and active")
    newest = site.api.get("/api/policy/revisions", workspaceId="default")["items"][0]
    item = f"#policy-revisions li[data-revision-id='{newest['id']}']"
    page.visible(f"{item} summary").click()
    page.has_text(f"{item} .policy-diff", "+1 −1")
    kinds = [
        (line.get_attribute("data-kind"), line.text.split(":")[0])
        for line in page.find_all(f"{item} .policy-diff .dl[data-kind]")
    ]
    assert kinds == [
        ("ctx", "        command.hosts.size() > 0"),
        ("ctx", '          && command.commands.exists(c, c.program in ["sh", "bash", "zsh"])'),
        ("ctx", "      then"),
        ("del", "-     reason"),
        ("add", "+     reason"),
    ]
    assert page.has_text(f"{item} .policy-diff", "⋯ 4 unchanged lines")
    assert page.console_errors() == []


def test_a_backtest_shows_what_a_candidate_would_have_done_to_the_recorded_calls(
    browser: Browser, site: Site
) -> None:
    browser.expect_console(failed_request("/api/policy/backtest", 422))  # the window below
    agent = {"x-tachograph-key": mint(site, "agent", None, workspaceId="default")}
    secret = f"/home/dev/repo/backtest-{uuid.uuid4().hex[:8]}.env"
    session = str(uuid.uuid4())
    for _ in range(3):
        body = pre_tool_use(session, "")
        body["tool_name"], body["tool_input"] = "Read", {"file_path": secret}
        answered = site.api.http.post("/hooks/claude", json=body, headers=agent)
        assert answered.status_code == 200 and answered.json() == {}  # it ran
    candidate = (
        "version: 1\nrules:\n  - id: secret-reads\n"
        f'    when: paths.exists(p, p == "{secret}")\n'
        "    then: deny\n    reason: Keep out of key files."
    )
    before = site.api.get("/api/policy/revisions", all="true")["items"]
    page = policy_page(browser, site, mint(site, "operator", "otto"))
    write(page, candidate)
    # A window that ends before it starts is refused, with the server's reason.
    page.js("document.querySelector('#policy-since').value = '2026-01-02T00:00'")
    page.js("document.querySelector('#policy-until').value = '2026-01-01T00:00'")
    page.find("#policy-backtest").click()
    page.has_text("#policy-editor-error", "since must be before until")
    # From an hour ago on: the three reads, denied where they ran.
    page.js(
        "document.querySelector('#policy-since').value = isoToLocal(arguments[0]);"
        "document.querySelector('#policy-until').value = ''",
        (datetime.now(UTC) - timedelta(hours=1)).isoformat(),
    )
    page.find("#policy-backtest").click()
    summary = page.has_text("#policy-backtest-summary", "evaluated")
    assert "3 calls denied, 0 calls held for a person, 0 calls given context" in summary
    row = "#policy-backtest-rules tr[data-rule-id='secret-reads']"
    assert page.find(f"{row} td.num").text == "3"
    examples = page.find_all(f"{row} li")
    assert len(examples) == 3
    assert all(secret in e.text and "(recorded: pass)" in e.text for e in examples)
    session_link = page.find(f"{row} li a").get_attribute("href") or ""
    assert "#sessions/" in session_link
    # Trying a candidate records no revision.
    assert site.api.get("/api/policy/revisions", all="true")["items"] == before
    page.js("document.querySelector(arguments[0]).scrollIntoView()", "#policy-backtest-title")
    page.screenshot("policy-backtest")
    assert page.console_errors() == []
