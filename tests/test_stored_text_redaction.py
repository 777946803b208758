"""Every text an agent or a handler sends is redacted before the log keeps it, through a
real `serve` on both stores: the title and summary derived from a prompt and a Stop
message, a handler's reason, context and replacement, an approval's summary and reason.
None of the secrets can be read back from any surface: the sessions list, the session,
its hook audit and export, GET /api/events and GET /api/stream. What the agent is
answered keeps the handler's real replacement (the runtime must run it)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from domain.redaction import REDACTED
from infra.settings import Settings
from tests.hook_server import HookServer, answer
from tests.support import admin_client
from tests.test_approvals_api import pending

pytestmark = pytest.mark.slow

ADMIN_KEY = "redaction-admin-key-for-tests"

PROMPT_SECRET = "Sup3rS3cretDbPass"
# A key the facts always redacted, and a password in a URL they did not: both must stay
# out of the title too.
PROMPT_KEY = "sk-ant-api03-" + "Zq7" * 8
PROMPT = f"Use {PROMPT_KEY}, migrate postgresql://admin:{PROMPT_SECRET}@db/app\nthanks"
STOP_SECRET = "hunter2-horse-battery"
STOP_MESSAGE = f"Done. I ran `mytool sync --password {STOP_SECRET}` and it worked."
REASON_SECRET = "dXNlcjpwYXNzd29yZA=="
CONTEXT_SECRET = "AzUr3AcC0untK3y=="
REPLACEMENT_SECRET = "RepL4cedPw"
ASK_SECRET = "T0kenInTheAsk"
SUMMARY_SECRET = "HeldCallPw99"


@pytest.fixture
def handler() -> Iterator[HookServer]:
    server = HookServer()
    server.routes["/prompt"] = answer(
        "pass", additionalContext=f"Storage: AccountKey={CONTEXT_SECRET};EndpointSuffix=x"
    )
    server.routes["/bash"] = answer(
        "modify",
        reason=f"rewritten; sent Authorization: Basic {REASON_SECRET}",
        replacement={"command": f"mysql -u root -p{REPLACEMENT_SECRET} app"},
    )
    server.routes["/ask"] = answer("ask", reason=f'please check: api_token="{ASK_SECRET} x"')
    yield server
    server.close()


@pytest.fixture
def serve(settings: Settings, tmp_path: Path, handler: HookServer) -> Iterator[httpx.Client]:
    hook = {"type": "http", "url": ""}
    hooks = {
        "UserPromptSubmit": [{**hook, "id": "prompt-context", "url": f"{handler.url}/prompt"}],
        "PreToolUse": [
            {**hook, "id": "rewrite", "url": f"{handler.url}/bash", "matcher": ["Bash"]},
            {**hook, "id": "review", "url": f"{handler.url}/ask", "matcher": ["Write"]},
        ],
    }
    rules = {"version": 1, "rules": [{"id": "db", "tool": "Grep", "match": "mysql"}]}
    env = {
        "TACHOGRAPH_HOOKS": json.dumps({"version": 1, "hooks": hooks}),
        "TACHOGRAPH_APPROVALS": json.dumps(rules),
        "TACHOGRAPH_HOOK_ALLOW_INSECURE_LOOPBACK": "1",
    }
    with admin_client(settings, tmp_path / "serve.log", env, ADMIN_KEY) as client:
        yield client


def new_session(client: httpx.Client) -> str:
    created = client.post("/api/sessions", json={"workspaceId": "default"})
    assert created.status_code == 201, created.text
    return str(created.json()["id"])


def position(response: httpx.Response) -> int:
    assert response.is_success, response.text
    return int(response.headers["x-tachograph-position"])


def log_text(client: httpx.Client) -> str:
    """Every stored event, as GET /api/events pages it."""
    pages, after = [], 0
    while after is not None:
        page = client.get("/api/events", params={"after": after, "limit": 500}).json()
        pages.append(json.dumps(page["events"]))
        after = page["next"]
    return "".join(pages)


def stream_text(client: httpx.Client, until: int) -> str:
    """GET /api/stream from the start of the log up to the event at `until`."""
    lines: list[str] = []
    with client.stream("GET", "/api/stream", params={"after": 0}, timeout=30) as response:
        assert response.status_code == 200
        for line in response.iter_lines():
            lines.append(line)
            if line.startswith("id:") and int(line[3:]) >= until:
                break
    return "\n".join(lines)


def surfaces(client: httpx.Client, session_id: str, until: int) -> dict[str, str]:
    """What each read surface shows, as of position `until`."""
    at = {"minPosition": until}
    return {
        "sessions": client.get("/api/sessions", params=at).text,
        "session": client.get(f"/api/sessions/{session_id}", params=at).text,
        "hooks": client.get(f"/api/sessions/{session_id}/hooks", params=at).text,
        "export": client.get(f"/api/sessions/{session_id}/export").text,
        "events": log_text(client),
        "stream": stream_text(client, until),
    }


def assert_nowhere(shown: dict[str, str], *secrets: str) -> None:
    for name, text in shown.items():
        for secret in secrets:
            assert secret not in text, f"{secret!r} readable in {name}"


def test_a_prompt_and_a_stop_message_leave_no_secret_in_title_summary_or_log(
    serve: httpx.Client,
) -> None:
    session_id = new_session(serve)
    events = f"/api/sessions/{session_id}/events"
    prompted = serve.post(events, json={"event": "UserPromptSubmit", "prompt": PROMPT})
    stopped = serve.post(events, json={"event": "Stop", "lastAssistantMessage": STOP_MESSAGE})
    shown = surfaces(serve, session_id, position(stopped))

    session = serve.get(f"/api/sessions/{session_id}").json()
    assert session["title"] == f"Use {REDACTED}, migrate postgresql://admin:{REDACTED}@db/app"
    assert session["summary"] == f"Done. I ran `mytool sync --password {REDACTED}` and it worked."
    listed = serve.get("/api/sessions").json()["items"]
    assert [s["title"] for s in listed if s["id"] == session_id] == [session["title"]]
    assert "postgresql://admin:" in shown["stream"] and "postgresql://admin:" in shown["export"]
    assert_nowhere(shown, PROMPT_KEY[:20], PROMPT_SECRET, STOP_SECRET, CONTEXT_SECRET)
    # The handler's context reached the agent as sent; only the log's copy is redacted.
    assert CONTEXT_SECRET in prompted.json()["additionalContext"]
    assert f"AccountKey={REDACTED}" in shown["events"]
    # A title given through the API is stored text too.
    renamed = serve.patch(f"/api/sessions/{session_id}", json={"title": "ssh with sshpass -p pw1"})
    assert renamed.is_success, renamed.text
    assert (
        serve.get(f"/api/sessions/{session_id}").json()["title"]
        == f"ssh with sshpass -p {REDACTED}"
    )
    # So are a session's client-owned messages: their strings, structure kept.
    message = {"role": "user", "text": "use ghp_" + "a1B2" * 9, "token": "t0k"}
    saved = serve.put(f"/api/sessions/{session_id}", json={"revision": 0, "messages": [message]})
    assert saved.is_success, saved.text
    assert serve.get(f"/api/sessions/{session_id}").json()["messages"] == [
        {"role": "user", "text": f"use {REDACTED}", "token": REDACTED}
    ]


def test_a_handlers_reason_and_replacement_are_recorded_redacted_and_answered_as_sent(
    serve: httpx.Client,
) -> None:
    session_id = new_session(serve)
    event = {
        "event": "PreToolUse",
        "eventId": "redaction-modify-1",
        "toolName": "Bash",
        "toolInput": {"command": "mysql app"},
    }
    answered = serve.post(f"/api/sessions/{session_id}/events", json=event)
    decision = answered.json()
    assert decision["outcome"] == "modify"
    assert decision["replacement"] == {"command": f"mysql -u root -p{REPLACEMENT_SECRET} app"}
    assert REASON_SECRET in decision["reason"]

    shown = surfaces(serve, session_id, position(answered))
    assert_nowhere(shown, REPLACEMENT_SECRET, REASON_SECRET)
    audit = serve.get(f"/api/sessions/{session_id}/hooks").json()["items"]
    assert [r["reason"] for r in audit if r["handlerId"] == "rewrite"] == [
        f"rewritten; sent Authorization: Basic {REDACTED}"
    ]
    assert f"-p{REDACTED} app" in shown["events"]
    # A retry is answered from the log, which no longer holds the password: refused
    # rather than run with `[redacted]` in the command.
    again = serve.post(f"/api/sessions/{session_id}/events", json=event).json()
    assert again["outcome"] == "deny" and "redacted copy" in again["reason"]
    assert REPLACEMENT_SECRET not in json.dumps(again)


def test_an_approval_request_keeps_no_secret_of_its_call_or_its_reason(
    serve: httpx.Client,
) -> None:
    session_id = new_session(serve)
    events = f"/api/sessions/{session_id}/events"
    held: list[httpx.Response] = []
    calls = [
        {"toolName": "Grep", "toolInput": {"pattern": f"mysql -u app -p{SUMMARY_SECRET}"}},
        {"toolName": "Write", "toolInput": {"file_path": "ci.yml", "content": "on: push"}},
    ]
    threads = [
        threading.Thread(
            target=lambda body=body: held.append(
                serve.post(events, json={"event": "PreToolUse", **body}, timeout=60)
            ),
            daemon=True,
        )
        for body in calls
    ]
    for thread in threads:
        thread.start()
    requests = pending(serve, 2)
    by_tool = {r["toolName"]: r for r in requests}
    assert by_tool["Grep"]["inputSummary"] == f"mysql -u app -p{REDACTED}"
    assert by_tool["Write"]["requestReason"] == f'please check: api_token="{REDACTED}"'
    for request in requests:
        decided = serve.post(f"/api/approvals/{request['id']}/decide", json={"decision": "deny"})
        assert decided.is_success, decided.text
    for thread in threads:
        thread.join(60)
    assert len(held) == 2 and all(r.json()["outcome"] == "deny" for r in held)
    last = max(position(r) for r in held)
    shown = surfaces(serve, session_id, last)
    shown["approvals"] = serve.get("/api/approvals").text
    assert_nowhere(shown, SUMMARY_SECRET, ASK_SECRET)
