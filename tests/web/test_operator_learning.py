"""The learning loop on the operator page: a revision learned from a real Claude Code turn,
shown with its content, its source signal's session and turn, and the deliveries that
carried it; revert from the page, a refused revert's reason, and the pipeline at a glance.

Screenshots go to `artefacts/` (see docs/operator-page.md).
"""

from __future__ import annotations

import copy
import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from selenium.webdriver.common.by import By

from domain.lifecycle import agent_session_uuid
from tests.tasks.conftest import wait_until
from tests.web.browser import Browser, failed_request
from tests.web.conftest import Site
from tests.web.test_operator_page import LABEL_AUDIT, confirm

pytestmark = pytest.mark.slow

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "claude-code"
AGENT = "claude-code"


def fixture(name: str) -> dict[str, Any]:
    payload: dict[str, Any] = json.loads((FIXTURES / name).read_text())["payload"]
    return payload


def claude(site: Site, name: str, session: str, **fields: Any) -> dict[str, Any]:
    """Post a real Claude Code hook payload, moved to `session`, as Claude Code would."""
    payload = {**copy.deepcopy(fixture(name)), "session_id": session, **fields}
    response = site.api.http.post("/hooks/claude", json=payload)
    assert response.status_code == 200, response.text
    answer: dict[str, Any] = response.json() if response.content else {}
    return answer


def tachograph_session(claude_session: str) -> str:
    return str(agent_session_uuid(f"claude-code:{claude_session}"))


def context_of(answer: dict[str, Any]) -> str:
    return str((answer.get("hookSpecificOutput") or {}).get("additionalContext") or "")


def test_a_learned_revision_shows_its_source_and_deliveries_and_reverts_from_the_page(
    page: Browser, site: Site
) -> None:
    page.expect_console(failed_request("/revert", 409))  # provoked on purpose below
    api = site.api
    assert api.http.patch("/api/settings/autonomy", json={"evolution": True}).status_code == 200

    # A Claude Code turn that the runtime ends with an error: a failure signal, a lesson.
    failed = str(uuid.uuid4())
    claude(
        site,
        "UserPromptSubmit-1.json",
        failed,
        prompt="Publish the release notes",
        prompt_id="turn-a",
    )
    claude(site, "StopFailure-1.json", failed, prompt_id="turn-a")

    def learned() -> dict[str, Any] | None:
        items = api.get("/api/autonomy/revisions", agentId=AGENT)["items"]
        return items[0] if items else None

    revision: dict[str, Any] = wait_until(learned, timeout=30, every=0.1)
    signal = api.get(f"/api/autonomy/signals/{revision['signalId']}")
    assert (signal["sessionId"], signal["turnId"]) == (tachograph_session(failed), "turn-a")

    # The next Claude Code session is told the lesson at its first prompt: one delivery.
    later = str(uuid.uuid4())
    answer = claude(site, "UserPromptSubmit-1.json", later, prompt_id="turn-b")
    assert "Publish the release notes" in context_of(answer)
    wait_until(
        lambda: api.get(f"/api/autonomy/revisions/{revision['id']}/deliveries")["count"] == 1
    )

    page.go(f"revisions/{revision['id']}")
    page.has_text("#revision-title", f"Revision {revision['id'][:8]}")
    page.has_text("#revision-content", "Publish the release notes")
    page.has_text("#revision-state", "latest")
    page.has_text("#revision-signal", "server_error")
    session_link = page.visible("#revision-signal a[data-link='signal-session']")
    assert (session_link.get_attribute("href") or "").endswith(f"#sessions/{signal['sessionId']}")
    turn_link = page.find("#revision-signal a[data-link='signal-turn']")
    assert (turn_link.get_attribute("href") or "").endswith(
        f"#sessions/{signal['sessionId']}/turns/turn-a"
    )
    page.has_text("#revision-deliveries-summary", "1 delivery")
    delivered = page.visible("#revision-deliveries tr")
    to_session = delivered.find_element(By.CSS_SELECTOR, "a[data-link='delivery-session']")
    assert (to_session.get_attribute("href") or "").endswith(
        f"#sessions/{tachograph_session(later)}"
    )
    title = api.get(f"/api/sessions/{tachograph_session(later)}")["title"]
    assert title and to_session.text == title.strip()  # by its title, not its id
    to_turn = delivered.find_element(By.CSS_SELECTOR, "a[data-link='delivery-turn']")
    assert "turn-b" in to_turn.text
    # Which event carried it: the prompt's answer (a lesson also given at session start
    # would be listed again, saying so).
    assert delivered.find_element(By.CSS_SELECTOR, ".delivered-via").text == "with the prompt"
    assert page.js(LABEL_AUDIT) == []
    page.screenshot("21-revision-deliveries")

    # The signal's turn link opens its session at that turn.
    turn_link.click()
    focused = page.visible("#calls details.turn.focused[data-turn='turn-a']")
    assert focused.get_attribute("open") is not None
    page.has_text("#session-fields", signal["sessionId"])
    # The delivery's session shows what its turn was given, linked back to the revision.
    page.go(f"sessions/{tachograph_session(later)}/turns/turn-b")
    given = page.visible("#calls details.turn[data-turn='turn-b'] .delivered")
    assert "instructions" in given.text and "with the prompt" in given.text
    back = given.find_element(By.CSS_SELECTOR, f"a[href='#revisions/{revision['id']}']")
    back.click()
    page.has_text("#revision-deliveries-summary", "1 delivery")

    # Revert from the page: the next prompt is no longer told the lesson.
    assert confirm(page, "#revision-revert") == "Revert this revision?"
    done = page.has_text("#revision-action-done", f"Revision {revision['id'][:8]} reverted")
    compensation = api.get(f"/api/autonomy/revisions/{revision['id']}")["revertedByRevisionId"]
    assert compensation and compensation[:8] in done
    page.has_text("#revision-state", "reverted")
    page.visible(f"#revision-fields a[href='#revisions/{compensation}']")
    after = claude(site, "UserPromptSubmit-1.json", later, prompt_id="turn-c")
    assert "Publish the release notes" not in context_of(after)

    # Reverting it again is refused; the page shows the server's reason and keeps focus.
    refusal = api.http.post(f"/api/autonomy/revisions/{revision['id']}/revert")
    assert (refusal.status_code, refusal.json()["error"]) == (409, "already_reverted")
    confirm(page, "#revision-revert")
    shown = page.has_text("#revision-action-error", refusal.json()["message"])
    assert "already_reverted" in shown
    page.until(lambda: page.js("return document.activeElement.id") == "revision-revert")
    page.screenshot("22-revision-refused-revert")

    # The compensation names the deliveries it supersedes and has no source signal.
    page.find(f"#revision-fields a[href='#revisions/{compensation}']").click()
    page.has_text("#revision-title", f"Revision {compensation[:8]}")
    page.has_text("#revision-fields", "1 delivery of")
    page.has_text("#revision-signal", "a compensation")
    page.has_text("#revision-deliveries-summary", "none")
    assert page.text("#revision-action-error") == ""

    # The autonomy view shows the pipeline at a glance, read from GET /api/autonomy/pipeline.
    page.go("autonomy")
    summary = api.get("/api/autonomy/pipeline")
    for step, count in (
        ("signals", summary["signals"]["total"]),
        ("decisions", summary["decisions"]["total"]),
        ("revisions", summary["revisions"]["learned"]),
        ("deliveries", summary["deliveries"]["count"]),
        ("reverts", summary["reverts"]["count"]),
    ):
        page.has_text(f"#pipeline-steps [data-step='{step}'] .step-count", str(count))
    assert summary["deliveries"]["count"] >= 1 and summary["reverts"]["count"] >= 1
    failures = summary["signals"]["byKind"]["failure"]
    page.has_text(
        "#pipeline-steps [data-step='signals'] [data-part='failure']", f"{failures} failure"
    )
    # Each listed revision opens its own view.
    page.visible(f"#revisions a[href='#revisions/{revision['id']}']")
    page.screenshot("23-autonomy-pipeline")
    assert page.console_errors() == []
