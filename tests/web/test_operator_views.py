"""Every view of the operator page, visited in turn on a server with data: none logs an
error (the conftest fixture fails the test on any script error or failed request), rows
name sessions by title, and a plain task's detail asks for no workflow."""

from __future__ import annotations

from urllib.parse import urlsplit

import pytest

from tests.web.browser import Browser
from tests.web.conftest import Site

pytestmark = pytest.mark.slow


def paths(page: Browser) -> list[str]:
    urls: list[str] = page.js("return performance.getEntriesByType('resource').map(e => e.name)")
    return [urlsplit(u).path for u in urls]


def test_every_view_loads_without_an_error_and_names_sessions_by_title(
    page: Browser, site: Site
) -> None:
    api = site.api
    page.js("performance.setResourceTimingBufferSize(100000)")
    session_id = api.post(
        "/api/sessions", {"workspaceId": "default", "title": "Tidy the docs"}, 201
    )["id"]
    call = {
        "event": "PreToolUse",
        "toolName": "Read",
        "toolCallId": "read-1",
        "toolInput": {"file_path": "/repo/README.md"},
    }
    api.post(f"/api/sessions/{session_id}/events", call)
    task_id = api.task("Summarise the changelog")

    page.go("tasks")
    page.visible(f"[data-task-id='{task_id}']")
    assert not page.find("#executor-note").is_displayed()  # this server runs tasks
    assert not page.find("#board-guide").is_displayed()

    page.go(f"tasks/{task_id}")
    page.has_text("#task-title", task_id[:8])
    page.until(lambda: paths(page).count(f"/api/tasks/{task_id}") >= 2, timeout=10)
    assert not any(p.endswith("/workflow") for p in paths(page))
    assert not page.find("#task-executor-note").is_displayed()

    page.go("sessions")
    page.visible(f"tr[data-session-id='{session_id}']")
    page.go(f"sessions/{session_id}")
    page.has_text("#session-title", "Tidy the docs")
    page.has_text("#calls", "README.md")

    page.go(f"activity?sessionId={session_id}")
    named = page.visible(f"#activity-rows a[href='#sessions/{session_id}']")
    assert named.text == "Tidy the docs"

    page.go("approvals")
    page.has_text("#approvals-updated", "Updated")
    page.go("autonomy")
    page.until(lambda: page.find("#autonomy-settings").get_attribute("data-loaded") == "true")
    page.has_text("#pipeline-updated", "Read")
    page.go("audit")
    page.has_text("#verify-result", "Events")
    page.go(f"stream/{task_id}")
    page.has_text("#stream-rows", "Created")
    assert page.console_errors() == []
