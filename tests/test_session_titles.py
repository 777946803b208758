"""Rows that name a session carry its title (`sessionTitle`), so the operator page names
sessions by title without a request per row: approvals (list, one, decision, stream) and
the activity search, through a real `serve` on both stores."""

from __future__ import annotations

import json
import uuid

import httpx
import pytest

from tests.hook_server import HookServer
from tests.test_approvals_api import handler, hook, issue, pending, pre_tool_use, serve

__all__ = ["handler", "serve"]  # fixtures used by name below

pytestmark = pytest.mark.slow


def stream_rows(client: httpx.Client, after: str, event: str) -> list[dict[str, object]]:
    """The `event` messages the stream sends after `after` (read until the first one)."""
    rows: list[dict[str, object]] = []
    headers = {"last-event-id": after, "accept": "text/event-stream"}
    with client.stream("GET", "/api/stream", headers=headers, timeout=15) as response:
        assert response.status_code == 200
        name = None
        for line in response.iter_lines():
            if line.startswith("event:"):
                name = line.split(":", 1)[1].strip()
            elif line.startswith("data:") and name == event:
                rows.append(json.loads(line.split(":", 1)[1]))
                return rows
    return rows


def test_approval_and_activity_rows_name_their_session(
    serve: httpx.Client, handler: HookServer
) -> None:
    agent = issue(serve, role="agent", workspaceId="default")
    native = str(uuid.uuid4())
    first = serve.post("/hooks/claude", json=pre_tool_use(native, "ls -la"), headers=agent)
    assert first.status_code == 200, first.text
    at = first.headers["x-tachograph-position"]
    [call] = serve.get("/api/activity", params={"minPosition": at}).json()["items"]
    session_id = call["sessionId"]
    assert call["sessionTitle"] is None  # no prompt, no rename: nothing to name it by yet

    renamed = serve.patch(f"/api/sessions/{session_id}", json={"title": "Release the docs"})
    assert renamed.status_code == 200, renamed.text
    position = renamed.headers["x-tachograph-position"]
    held = hook(serve, agent, pre_tool_use(native, "git push origin main"))
    [request] = pending(serve)
    assert request["sessionId"] == session_id and request["sessionTitle"] == "Release the docs"
    one = serve.get(f"/api/approvals/{request['id']}").json()
    assert one["sessionTitle"] == "Release the docs"
    [streamed] = stream_rows(serve, position, "approval.requested")
    assert streamed["sessionTitle"] == "Release the docs"

    decided = serve.post(f"/api/approvals/{request['id']}/decide", json={"decision": "allow"})
    assert decided.status_code == 200 and decided.json()["sessionTitle"] == "Release the docs"
    answered = held.result()
    items = serve.get(
        "/api/activity",
        params={"sessionId": session_id, "minPosition": answered.headers["x-tachograph-position"]},
    ).json()["items"]
    assert {i["sessionTitle"] for i in items} == {"Release the docs"}

    # A deleted session's rows (settled approvals stay) name no title.
    assert serve.delete(f"/api/sessions/{session_id}").status_code == 204
    gone = serve.get(f"/api/approvals/{request['id']}").json()
    assert gone["sessionId"] == session_id and gone["sessionTitle"] is None
