"""Cost on the operator page: per session on the sessions list and in the session view,
each turn's model requests, and the chart of cost over time per workspace.

The usage comes in as a real agent sends it: Claude Code 2.1.328's OTLP log export
(tests/fixtures/otlp/) posted to `/v1/logs`, once as the session its hooks created
(workspace `default`, 2026-12-06) and once, a day earlier, into a session of a second
workspace.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.web.browser import Browser
from tests.web.conftest import Site

pytestmark = pytest.mark.slow

FIXTURE = Path(__file__).parents[1] / "fixtures" / "otlp" / "claude-code-2.1.328-logs.json"
NATIVE = "330b8d74-e30b-49cd-b39d-9a1f57f5d9a9"
DAY_NS = 86_400 * 10**9


def export(native: str, days_earlier: int = 0) -> bytes:
    """The captured export as another session, its records moved `days_earlier`."""
    body: dict[str, Any] = json.loads(FIXTURE.read_text().replace(NATIVE, native))
    for record in body["resourceLogs"][0]["scopeLogs"][0]["logRecords"]:
        for key in ("timeUnixNano", "observedTimeUnixNano"):
            record[key] = str(int(record[key]) - days_earlier * DAY_NS)
    return json.dumps(body).encode()


def post_logs(site: Site, body: bytes, **headers: str) -> str:
    answer = site.api.http.post(
        "/v1/logs", content=body, headers={"content-type": "application/json", **headers}
    )
    assert (answer.status_code, answer.json()) == (200, {}), answer.text
    return answer.headers["x-tachograph-position"]


def test_cost_shows_per_session_per_turn_and_over_time(page: Browser, site: Site) -> None:
    api = site.api
    native = "web-usage-1"
    start = {"session_id": native, "hook_event_name": "SessionStart", "source": "startup"}
    prompt = {"session_id": native, "hook_event_name": "UserPromptSubmit", "prompt": "say hi"}
    for hook in (start, prompt):
        answered = api.http.post("/hooks/claude", json=hook)
        assert answered.status_code == 200, answered.text
    post_logs(site, export(native))
    (site.root / "usage-b").mkdir()
    api.post("/api/workspaces", {"id": "usage-b", "path": "usage-b"}, 201)
    other = api.post("/api/sessions", {"workspaceId": "usage-b", "title": "Other team"}, 201)
    position = post_logs(
        site, export("web-usage-2", days_earlier=1), **{"x-tachograph-session-id": other["id"]}
    )
    api.get("/api/usage", minPosition=position)
    session = next(
        s for s in api.get("/api/sessions")["items"] if s.get("agentSessionId") == native
    )

    page.open("sessions")
    row = f"tr[data-session-id='{session['id']}']"
    page.visible(row)
    assert page.has_text(f"{row} td.cost", "$0.0012")
    assert "2 model requests" in (page.find(f"{row} td.cost").get_attribute("title") or "")
    # The chart: a series per workspace, a point per day it spent on.
    page.visible("#cost-chart")
    page.until(lambda: len(page.find_all("#cost-chart circle")) == 2)
    points = {
        (c.find_element("xpath", "..").get_attribute("data-workspace"), c.get_attribute("data-day"))
        for c in page.find_all("#cost-chart circle")
    }
    assert points == {("default", "2026-12-06"), ("usage-b", "2026-12-05")}
    legend = page.text("#cost-chart-legend")
    assert "default: $0.0012" in legend and "usage-b: $0.0012" in legend

    page.go(f"sessions/{session['id']}")
    page.has_text("#session-fields", "$0.0012 (2 model requests: 200 in, 20 out, $0.0012)")
    page.has_text("#calls", "2 model requests · $0.0012")
    requests = page.find_all("#calls li[data-model-request]")
    # Each after its time: the model, tokens, duration and cost.
    assert [r.text[r.text.index("claude-opus") :] for r in requests] == [
        "claude-opus-5-5 100 in, 10 out, 107 ms · $0.00060",
        "claude-opus-5-5 100 in, 10 out, 18 ms · $0.00060",
    ]
    assert page.console_errors() == []
