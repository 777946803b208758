"""The operator page follows GET /api/stream in headless Chromium: what the API changes
appears in place, without a reload and without reading the list again."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import urlsplit

import pytest

from tests.web.browser import Browser
from tests.web.conftest import Site
from tests.web.test_operator_page import SLEEPER, column

pytestmark = pytest.mark.slow

# Set on the loaded page: a reload would drop it.
MARK = "window.__notReloaded = true"
STILL_MARKED = "return window.__notReloaded === true"


def reads(page: Browser, path: str) -> int:
    """How many requests the page has made to `path` (list reads, not the stream)."""
    urls: list[str] = page.js("return performance.getEntriesByType('resource').map(e => e.name)")
    return sum(1 for u in urls if urlsplit(u).path == path)


def live(page: Browser) -> Browser:
    page.js("performance.setResourceTimingBufferSize(100000)")
    page.has_text("#live-state", "Live")
    page.js(MARK)
    return page


def row_text(page: Browser, session_id: str, cell: str) -> str:
    return str(
        page.js(
            "const r = document.querySelector(`tr[data-session-id='${arguments[0]}']`);"
            "return r ? r.cells_[arguments[1]].textContent : null",
            session_id,
            cell,
        )
    )


def test_a_renamed_session_and_its_new_summary_show_without_a_reload(
    page: Browser, site: Site
) -> None:
    api = site.api
    session_id = api.post("/api/sessions", {"workspaceId": "default", "title": "Before"}, 201)["id"]
    page.go("sessions")
    live(page)
    row = page.visible(f"tr[data-session-id='{session_id}']")
    listed = reads(page, "/api/sessions")

    renamed = api.http.patch(f"/api/sessions/{session_id}", json={"title": "Renamed live"})
    assert renamed.status_code == 200, renamed.text
    page.until(lambda: row_text(page, session_id, "title") == "Renamed live", timeout=10)
    stop = {"event": "Stop", "lastAssistantMessage": "Summarised while you watched."}
    api.post(f"/api/sessions/{session_id}/events", stop)
    page.until(lambda: "Summarised while" in row_text(page, session_id, "summary"), timeout=10)
    page.until(lambda: row_text(page, session_id, "status") == "idle", timeout=10)

    # The same row, updated from the stream: no reload, no second read of the list.
    assert page.find(f"tr[data-session-id='{session_id}']") == row
    assert page.js(STILL_MARKED)
    assert reads(page, "/api/sessions") == listed
    assert page.console_errors() == []


def test_a_task_moved_through_the_api_moves_its_card_without_a_reload(
    page: Browser, site: Site
) -> None:
    live(page)
    # A fresh load reads the board once, from where its stream starts, and shows "Live"
    # only once that read is in: nothing is read after this (it once was, racing this).
    listed = reads(page, "/api/tasks")
    assert listed == 1
    task_id = site.api.task(SLEEPER)
    # A new task's card appears from the stream alone.
    page.until(lambda: column(page, task_id) in {"queued", "running"}, timeout=10)
    card = page.find(f"[data-task-id='{task_id}']")
    page.until(lambda: column(page, task_id) == "running", timeout=20)
    site.api.post(f"/api/tasks/{task_id}/cancel")
    page.until(lambda: column(page, task_id) == "cancelled", timeout=20)
    site.api.post(f"/api/tasks/{task_id}/resolve", {"summary": "Done by hand."})
    page.until(lambda: column(page, task_id) == "completed", timeout=10)

    assert page.find(f"[data-task-id='{task_id}']") == card
    assert card.get_attribute("data-status") == "completed"
    assert page.js(STILL_MARKED)
    assert reads(page, "/api/tasks") == listed
    site.api.http.delete(f"/api/tasks/{task_id}")
    page.until(lambda: column(page, task_id) is None, timeout=10)
    assert page.console_errors() == []


def test_a_dropped_stream_resumes_after_its_last_id_and_misses_nothing(
    page: Browser, site: Site
) -> None:
    api = site.api
    session_id = api.post("/api/sessions", {"workspaceId": "default", "title": "Kept"}, 201)["id"]
    page.go("sessions")
    live(page)
    page.visible(f"tr[data-session-id='{session_id}']")
    listed = reads(page, "/api/sessions")
    first = api.http.patch(f"/api/sessions/{session_id}", json={"title": "Seen live"})
    assert first.status_code == 200, first.text
    page.until(lambda: row_text(page, session_id, "title") == "Seen live", timeout=10)
    assert page.js("return live.lastId") >= int(first.headers["x-tachograph-position"])

    _drop_rename_and_resume(page, site, session_id, listed)


def test_a_stream_dropped_before_its_first_message_resumes_from_where_it_began(
    page: Browser, site: Site
) -> None:
    api = site.api
    created = api.http.post("/api/sessions", json={"workspaceId": "default", "title": "Quiet"})
    assert created.status_code == 201, created.text
    session_id = created.json()["id"]
    # The read models hold the session before the page (loaded again) opens its stream,
    # so the stream, which starts at the log's head, has nothing to send until the rename.
    position = created.headers["x-tachograph-position"]
    assert api.http.get("/api/sessions", params={"minPosition": position}).status_code == 200
    page.open("sessions")
    live(page)
    page.visible(f"tr[data-session-id='{session_id}']")
    listed = reads(page, "/api/sessions")
    began = page.js("return live.after")
    # Where the stream began, or later if another test's work sent it a message since.
    assert isinstance(began, int) and page.js("return live.lastId") >= began

    _drop_rename_and_resume(page, site, session_id, listed)


def _drop_rename_and_resume(page: Browser, site: Site, session_id: str, listed: int) -> None:
    """Cut the stream; while the page waits to reconnect, rename the session; the rename
    must arrive on the resumed stream, without the list being read again."""
    page.js("live.abort.abort()")
    page.has_text("#live-state", "Reconnecting")
    renamed = site.api.http.patch(
        f"/api/sessions/{session_id}", json={"title": "Changed while away"}
    )
    assert renamed.status_code == 200, renamed.text
    page.has_text("#live-state", "Live", timeout=10)
    page.until(lambda: row_text(page, session_id, "title") == "Changed while away", timeout=10)
    # Resumed from Last-Event-ID: the change came on the stream, the list was not read.
    assert reads(page, "/api/sessions") == listed
    assert page.js("return live.lastId") >= int(renamed.headers["x-tachograph-position"])
    assert page.console_errors() == []


NOTIFICATIONS_STUB = """
window.__notes = [];
window.Notification = class {
  constructor(title, options) { window.__notes.push({ title, options }); }
  static requestPermission() {
    window.Notification.permission = "granted";
    return Promise.resolve("granted");
  }
};
window.Notification.permission = arguments[0];
"""


def approval(status: str) -> dict[str, Any]:
    return {
        "id": "6f1d3a52-0000-4000-8000-000000000001",
        "status": status,
        "sessionId": "0e5b8f9c-0000-4000-8000-000000000002",
        "toolName": "Bash",
    }


def test_a_requested_approval_shows_the_badge_and_a_silent_notification(
    page: Browser, site: Site
) -> None:
    """The badge and the notification, fed the messages the stream sends as its parser
    passes them on (tests/web/test_operator_approvals.py drives them from a held call)."""
    assert not page.find("#approvals-badge").is_displayed()
    page.js(NOTIFICATIONS_STUB, "default")
    page.js("document.querySelector('#notify-me').click()")  # asks only on this click
    page.until(lambda: page.js("return Notification.permission") == "granted")
    page.until(lambda: not page.find("#notify-me").is_displayed())

    deliver = "liveMessage({event: arguments[0], data: [arguments[1]], id: null})"
    page.js(deliver, "approval.requested", json.dumps(approval("pending")))
    page.has_text("#approvals-badge", "1 approval pending")
    assert page.find("#approvals-badge").is_displayed()
    notes = page.js("return window.__notes")
    assert len(notes) == 1 and notes[0]["title"] == "Approval requested"
    assert notes[0]["options"]["silent"] is True
    assert "Bash" in notes[0]["options"]["body"]

    page.js(deliver, "approval.decided", json.dumps(approval("allowed")))
    page.until(lambda: not page.find("#approvals-badge").is_displayed())
    assert len(page.js("return window.__notes")) == 1
    assert page.console_errors() == []
