"""GET /api/activity and `tachograph activity`: tool calls across sessions by tool, text,
workspace, session, decision and time (both stores)."""

from __future__ import annotations

import json
import subprocess
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient

from infra.settings import Settings
from tests.support import run_cli

ROOT = Path(__file__).resolve().parents[1]
KEY = "sk-" + "Qw3rTy7uI9oP1aS5dF8g" * 2


def call(client: TestClient, session_id: str, command: str, call_id: str, **extra: Any) -> str:
    """A Bash PreToolUse (and its PostToolUse unless told otherwise); returns a position."""
    tool = extra.pop("tool", "Bash")
    tool_input = extra.pop("tool_input", {"command": command})
    response = client.post(
        f"/api/sessions/{session_id}/events",
        json={
            "event": "PreToolUse",
            "toolName": tool,
            "toolCallId": call_id,
            "toolInput": tool_input,
        },
    )
    assert response.status_code == 200, response.text
    if extra.get("post", True):
        response = client.post(
            f"/api/sessions/{session_id}/events",
            json={
                "event": extra.get("post_event", "PostToolUse"),
                "toolName": tool,
                "toolCallId": call_id,
                "toolInput": tool_input,
                "toolResponse": "done",
                "durationMs": 7,
            },
        )
        assert response.status_code == 200, response.text
    return str(response.headers["x-tachograph-position"])


def search(client: TestClient, at: str, **params: Any) -> dict[str, Any]:
    response = client.get("/api/activity", params={"minPosition": at, **params})
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def seed(client: TestClient, settings: Settings) -> tuple[str, str, str]:
    (settings.workspace_root / "repo").mkdir()
    assert client.post("/api/workspaces", json={"id": "repo", "path": "repo"}).status_code == 201
    first = client.post("/api/sessions", json={"workspaceId": "default"}).json()["id"]
    second = client.post("/api/sessions", json={"workspaceId": "repo"}).json()["id"]
    call(client, first, "git status", "c1")
    call(client, first, "git push --force origin main", "c2", post_event="PostToolUseFailure")
    call(client, second, "GIT PUSH --FORCE upstream", "c3", post=False)
    call(client, second, "", "c4", tool="Write", tool_input={"file_path": "/repo/100%_done.txt"})
    at = call(client, second, f"curl -H 'Authorization: Bearer {KEY}' api.test", "c5")
    return first, second, at


def summaries(body: dict[str, Any]) -> list[str]:
    return [item["summary"] for item in body["items"]]


def test_search_by_text_tool_workspace_session_and_decision(
    client: TestClient, settings: Settings
) -> None:
    first, second, at = seed(client, settings)
    pushed = search(client, at, contains="push --force")
    assert summaries(pushed) == ["GIT PUSH --FORCE upstream", "git push --force origin main"]
    assert pushed["sortedBy"] == "recordedAt"
    newest, oldest = pushed["items"]
    assert (oldest["sessionId"], oldest["workspaceId"], oldest["status"]) == (
        first,
        "default",
        "error",
    )
    assert (newest["workspaceId"], newest["status"], newest["tool"]) == (
        "repo",
        "no_result",
        "Bash",
    )
    assert oldest["durationMs"] == 7 and oldest["decision"] == "pass"
    assert summaries(search(client, at, contains="100%_")) == ["/repo/100%_done.txt"]
    assert summaries(search(client, at, contains="%")) == ["/repo/100%_done.txt"]  # short: a scan
    assert summaries(search(client, at, tool="Write")) == ["/repo/100%_done.txt"]
    assert len(search(client, at, workspaceId="repo")["items"]) == 3
    assert summaries(search(client, at, sessionId=first)) == [
        "git push --force origin main",
        "git status",
    ]
    assert search(client, at, outcome="deny")["items"] == []
    # One vocabulary with the CLI: the status column's words name the same decisions.
    assert search(client, at, outcome="allowed") == search(client, at, outcome="pass")
    assert (
        search(client, at, contains="push", workspaceId="default", tool="Bash")["items"][0][
            "summary"
        ]
        == "git push --force origin main"
    )
    # Secrets are redacted before they are recorded, so they cannot be found either.
    assert search(client, at, contains=KEY[:20])["items"] == []
    assert summaries(search(client, at, contains="Bearer [redacted]")) == [
        "curl -H 'Authorization: Bearer [redacted]' api.test"
    ]


def test_paging_and_time_filters(client: TestClient, settings: Settings) -> None:
    _, _, at = seed(client, settings)
    page = search(client, at, limit=2)
    assert len(page["items"]) == 2 and page["next"] == page["items"][-1]["position"]
    rest = search(client, at, limit=10, before=page["next"])
    assert len(rest["items"]) == 3 and rest["next"] is None
    positions = [i["position"] for i in page["items"] + rest["items"]]
    assert positions == sorted(positions, reverse=True)
    now = datetime.now(UTC)
    assert len(search(client, at, since=(now - timedelta(minutes=5)).isoformat())["items"]) == 5
    assert search(client, at, until=(now - timedelta(minutes=5)).isoformat())["items"] == []
    naive = client.get("/api/activity", params={"since": "2026-12-01T00:00:00"})
    assert naive.status_code == 422 and "since" in naive.text
    bad = client.get("/api/activity", params={"outcome": "maybe"})
    assert bad.status_code == 422 and "outcome" in bad.text


def test_a_deleted_sessions_calls_leave_the_search(client: TestClient, settings: Settings) -> None:
    first, _, at = seed(client, settings)
    deleted = client.delete(f"/api/sessions/{first}")
    assert deleted.status_code in (200, 204)
    later = deleted.headers.get("x-tachograph-position", at)
    assert search(client, later, sessionId=first)["items"] == []
    assert summaries(search(client, later, contains="push --force")) == [
        "GIT PUSH --FORCE upstream"
    ]


def test_the_cli_searches_as_the_api_does(client: TestClient, settings: Settings) -> None:
    _, _, at = seed(client, settings)
    expected = search(client, at, contains="push --force")["items"]

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return run_cli(settings, "activity", *args)

    ndjson = run("--contains", "push --force", "--format", "ndjson")
    assert ndjson.returncode == 0, ndjson.stderr
    assert [json.loads(line) for line in ndjson.stdout.splitlines()] == expected
    table = run("--tool", "Write")
    assert table.returncode == 0, table.stderr
    header, row = table.stdout.splitlines()
    assert header.split()[:3] == ["at", "sessionId", "tool"]
    assert row.endswith("/repo/100%_done.txt")
    naive = run("--since", "2026-12-01T00:00:00")
    assert naive.returncode == 2 and "time zone" in naive.stderr
    assert str(uuid.UUID(expected[0]["sessionId"])) == expected[0]["sessionId"]
    # What a person types: relative times, the page's short ids, the status column's words.
    recent = run("--since", "yesterday", "--until", "now", "--format", "ndjson")
    assert recent.returncode == 0, recent.stderr
    assert len(recent.stdout.splitlines()) == 5
    assert run("--since", "1h", "--format", "ndjson").stdout == recent.stdout
    assert run("--until", "2h", "--format", "ndjson").stdout == ""
    vague = run("--since", "last tuesday")
    assert vague.returncode == 2 and "'last tuesday' is not a time" in vague.stderr
    pushed = expected[0]["sessionId"]
    short = run("--session", pushed[:8], "--format", "ndjson")
    assert short.returncode == 0, short.stderr
    assert {json.loads(line)["sessionId"] for line in short.stdout.splitlines()} == {pushed}
    unknown = run("--session", "ffffffff")
    assert unknown.returncode == 2 and "'ffffffff': no session id starts with it" in unknown.stderr
    typo = run("--session", "c1e1-not-hex")
    assert typo.returncode == 2 and "'c1e1-not-hex' is not a session id" in typo.stderr
    denied = run("--outcome", "denied", "--format", "ndjson")
    assert denied.returncode == 0, denied.stderr
    assert denied.stdout == run("--outcome", "deny", "--format", "ndjson").stdout


def test_text_search_uses_each_stores_own_index(client: TestClient) -> None:
    store = client.app.state.services.store  # type: ignore[attr-defined]
    if store.dialect == "sqlite":
        (row,) = store.query("SELECT sql FROM sqlite_master WHERE name = 'rm_activity_text'")
        assert "fts5" in row["sql"] and "trigram" in row["sql"]
        plan = store.query(
            "EXPLAIN QUERY PLAN SELECT rowid FROM rm_activity_text WHERE rm_activity_text MATCH ?",
            ('"push"',),
        )
        assert any("VIRTUAL TABLE INDEX" in str(p["detail"]) for p in plan), plan
    else:
        (row,) = store.query(
            "SELECT indexdef FROM pg_indexes WHERE indexname = 'rm_activity_summary_trgm' "
            "AND schemaname = current_schema()"
        )
        assert "gin_trgm_ops" in row["indexdef"]
