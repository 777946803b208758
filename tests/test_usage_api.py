"""Usage from the runtimes' OpenTelemetry, through the HTTP API, on both stores.

The bodies are real exports: Claude Code 2.1.328 and Gemini CLI, run offline against the
Messages / Gemini API stand-ins with their telemetry pointed at a recording receiver
(tests/fixtures/otlp/). The receiver takes them as JSON and as gzip'd protobuf; the
sessions, the timeline, GET /api/usage and a rebuild of the read models all agree.
"""

from __future__ import annotations

import copy
import gzip
import json
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from google.protobuf.json_format import MessageToDict, Parse
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import (
    ExportLogsServiceRequest,
    ExportLogsServiceResponse,
)

from api.app import create_app
from domain.lifecycle import agent_session_uuid
from infra.settings import Settings
from projections.replay import replay
from tests.support import run_cli
from tests.test_metrics import scrape, value

FIXTURES = Path(__file__).parent / "fixtures" / "otlp"
CLAUDE_LOGS = json.loads((FIXTURES / "claude-code-2.1.328-logs.json").read_text())
CLAUDE_METRICS = (FIXTURES / "claude-code-2.1.328-metrics.json").read_bytes()
GEMINI_LOGS = json.loads((FIXTURES / "gemini-cli-logs.json").read_text())
CLAUDE_NATIVE = "330b8d74-e30b-49cd-b39d-9a1f57f5d9a9"
GEMINI_NATIVE = "89eff2ca-be75-4822-bcde-d3d60ab869c9"
JSON = {"content-type": "application/json"}
PROTOBUF = {"content-type": "application/x-protobuf"}
# What the stand-in reported for each of the two requests of the captured run (100 in,
# 10 out), and what Claude Code priced each at (its own table: 600 micro-dollars).
TWO_REQUESTS = {
    "requests": 2,
    "inputTokens": 200,
    "outputTokens": 20,
    "cacheReadTokens": 0,
    "cacheCreationTokens": 0,
    "costUsd": 0.0012,
}


def with_session(export: dict[str, Any], native: str) -> dict[str, Any]:
    """The export as another session of the same runtime would send it."""
    text = json.dumps(export)
    for old in (CLAUDE_NATIVE, GEMINI_NATIVE):
        text = text.replace(old, native)
    changed: dict[str, Any] = json.loads(text)
    return changed


def start_claude_session(client: TestClient, native: str) -> str:
    """A Claude Code session as its SessionStart hook creates it."""
    hook = {"session_id": native, "hook_event_name": "SessionStart", "source": "startup"}
    assert client.post("/hooks/claude", json=hook).status_code == 200
    return str(agent_session_uuid(f"claude-code:{native}"))


def export_logs(client: TestClient, body: dict[str, Any]) -> Any:
    answer = client.post("/v1/logs", content=json.dumps(body), headers=JSON)
    assert answer.status_code == 200, answer.text
    return answer


def read(client: TestClient, path: str, answer: Any = None, **params: Any) -> Any:
    """A GET after the export's records are in the read models."""
    position = answer.headers.get("x-tachograph-position") if answer is not None else None
    if position is not None:
        params["minPosition"] = position
    got = client.get(path, params=params)
    assert got.status_code == 200, got.text
    return got.json()


def test_claude_codes_export_is_the_sessions_usage_once_however_often_it_is_sent(
    client: TestClient,
) -> None:
    session_id = start_claude_session(client, CLAUDE_NATIVE)
    first = export_logs(client, CLAUDE_LOGS)
    assert first.json() == {}
    assert read(client, f"/api/sessions/{session_id}", first)["usage"] == TWO_REQUESTS
    # The exporter's retry of the same batch, and the metrics repeating the same requests.
    again = export_logs(client, CLAUDE_LOGS)
    assert again.json() == {} and "x-tachograph-position" not in again.headers
    metrics = client.post("/v1/metrics", content=CLAUDE_METRICS, headers=JSON)
    assert (metrics.status_code, metrics.json()) == (200, {})
    listed = read(client, "/api/sessions")["items"]
    assert [s["usage"] for s in listed if s["id"] == session_id] == [TWO_REQUESTS]
    by_session = read(client, "/api/usage", groupBy="session")["items"]
    assert by_session == [{"key": session_id, **TWO_REQUESTS}]


def test_a_gzipped_protobuf_export_counts_as_its_json_twin(client: TestClient) -> None:
    session_id = start_claude_session(client, "proto-1")
    message = Parse(json.dumps(with_session(CLAUDE_LOGS, "proto-1")), ExportLogsServiceRequest())
    body = gzip.compress(message.SerializeToString())
    answer = client.post("/v1/logs", content=body, headers={**PROTOBUF, "content-encoding": "gzip"})
    assert answer.status_code == 200, answer.text
    assert answer.headers["content-type"] == "application/x-protobuf"
    response = ExportLogsServiceResponse()
    response.ParseFromString(answer.content)
    assert MessageToDict(response) == {}
    assert read(client, f"/api/sessions/{session_id}", answer)["usage"] == TWO_REQUESTS
    # The same requests as JSON: already there.
    json_twin = export_logs(client, with_session(CLAUDE_LOGS, "proto-1"))
    assert "x-tachograph-position" not in json_twin.headers


def test_gemini_clis_requests_count_without_a_cost(client: TestClient) -> None:
    answer = export_logs(client, GEMINI_LOGS)
    session_id = str(agent_session_uuid(f"gemini-cli:{GEMINI_NATIVE}"))
    items = read(client, "/api/usage", answer, groupBy="session")["items"]
    assert items == [
        {
            "key": session_id,
            "requests": 1,
            "inputTokens": 100,
            "outputTokens": 10,
            "cacheReadTokens": 0,
            "cacheCreationTokens": 0,
            "costUsd": 0.0,
        }
    ]
    assert read(client, "/api/usage", groupBy="agent")["items"][0]["key"] == "gemini-cli"
    assert read(client, "/api/usage", groupBy="model")["items"][0]["key"] == "gemini-2.5-pro"


def test_usage_groups_by_workspace_agent_model_and_day_within_a_window(
    client: TestClient,
) -> None:
    start_claude_session(client, CLAUDE_NATIVE)
    export_logs(client, CLAUDE_LOGS)
    answer = export_logs(client, GEMINI_LOGS)
    # Both runs were captured on 2026-12-06 (UTC).
    read(client, "/api/usage", answer)
    by = {
        group: read(client, "/api/usage", groupBy=group)["items"]
        for group in ("workspace", "agent", "model", "day")
    }
    assert [(i["key"], i["requests"]) for i in by["workspace"]] == [("default", 3)]
    assert [(i["key"], i["requests"], i["costUsd"]) for i in by["agent"]] == [
        ("claude-code", 2, 0.0012),
        ("gemini-cli", 1, 0.0),
    ]
    assert [i["key"] for i in by["model"]] == ["claude-opus-5-5", "gemini-2.5-pro"]
    assert [(i["key"], i["inputTokens"]) for i in by["day"]] == [("2026-12-06", 300)]
    # Claude Code's two requests came at 06:27:42.6 and .7, Gemini's at 06:28:35.
    window = {"since": "2026-12-06T06:28:00Z", "until": "2026-12-07T00:00:00Z"}
    assert [i["key"] for i in read(client, "/api/usage", groupBy="agent", **window)["items"]] == [
        "gemini-cli"
    ]
    daily = read(client, "/api/usage/daily")["items"]
    summed = {k: v for k, v in by["workspace"][0].items() if k != "key"}
    assert daily == [{"workspace": "default", "day": "2026-12-06", **summed}]
    refused = client.get("/api/usage", params={"groupBy": "tool"})
    assert refused.status_code == 422 and "groupBy" in refused.text
    assert client.get("/api/usage", params={"since": "yesterday"}).status_code == 422


def test_the_timeline_shows_each_turns_model_requests(client: TestClient) -> None:
    session_id = start_claude_session(client, CLAUDE_NATIVE)
    prompt = {
        "session_id": CLAUDE_NATIVE,
        "hook_event_name": "UserPromptSubmit",
        "prompt": "say hi",
    }
    assert client.post("/hooks/claude", json=prompt).status_code == 200
    answer = export_logs(client, CLAUDE_LOGS)
    turns = read(client, f"/api/sessions/{session_id}/timeline", answer)["items"]
    requests = [r for turn in turns for r in turn["modelRequests"]]
    assert [(r["model"], r["inputTokens"], r["outputTokens"], r["costUsd"]) for r in requests] == [
        ("claude-opus-5-5", 100, 10, 0.0006),
        ("claude-opus-5-5", 100, 10, 0.0006),
    ]
    assert requests[0]["promptId"] == "c2c2604b-b237-4bae-8f68-b267e974ca19"
    assert [r["durationMs"] for r in requests] == [107, 18]
    assert sum(turn["usage"]["costUsd"] for turn in turns) == pytest.approx(0.0012)


def test_what_no_runtime_is_mapped_for_is_taken_and_ignored(client: TestClient) -> None:
    unknown = copy.deepcopy(CLAUDE_LOGS)
    resource = unknown["resourceLogs"][0]["resource"]["attributes"]
    for attribute in resource:
        if attribute["key"] == "service.name":
            attribute["value"] = {"stringValue": "some-other-agent"}
    unknown["resourceLogs"][0]["somethingNew"] = {"nested": [1, 2]}
    assert export_logs(client, unknown).json() == {}
    assert export_logs(client, {}).json() == {}
    assert export_logs(client, {"resourceLogs": [None, 3, {"scopeLogs": "x"}]}).json() == {}
    # Repeated fields that are not lists at all (a number once answered 500).
    for odd in ({"resourceLogs": 7}, {"resourceLogs": [{"scopeLogs": 3}]}):
        assert export_logs(client, odd).json() == {}
    assert export_logs(client, {"resourceLogs": [{"scopeLogs": [{"logRecords": 5}]}]}).json() == {}
    assert read(client, "/api/usage")["items"] == []


def test_a_request_with_unreadable_figures_is_refused_alone(client: TestClient) -> None:
    broken = with_session(CLAUDE_LOGS, "broken-1")
    records = broken["resourceLogs"][0]["scopeLogs"][0]["logRecords"]
    first = next(r for r in records if r["body"]["stringValue"] == "claude_code.api_request")
    for attribute in first["attributes"]:
        if attribute["key"] == "input_tokens":
            attribute["value"] = {"stringValue": "many"}
    answer = export_logs(client, broken)
    assert answer.json() == {
        "partialSuccess": {
            "rejectedLogRecords": "1",
            "errorMessage": "A claude-code model request was refused: input_tokens is not a "
            "number.",
        }
    }
    usage = read(client, "/api/usage", answer)["items"]
    assert [(i["requests"], i["inputTokens"]) for i in usage] == [(1, 100)]
    # The same refusal in protobuf: the partial success in the response message.
    message = Parse(json.dumps(with_session(broken, "broken-2")), ExportLogsServiceRequest())
    answer = client.post("/v1/logs", content=message.SerializeToString(), headers=PROTOBUF)
    response = ExportLogsServiceResponse()
    response.ParseFromString(answer.content)
    assert response.partial_success.rejected_log_records == 1
    assert "input_tokens is not a number" in response.partial_success.error_message


@pytest.mark.parametrize(
    ("body", "headers", "status", "problem"),
    [
        (b"{not json", JSON, 400, "is not valid JSON"),
        (b"[1, 2]", JSON, 400, "is not an OTLP logs request"),
        (b'{"resourceLogs": NaN}', JSON, 400, "NaN"),
        (b"\xff\x00garbage", PROTOBUF, 400, "is not an OTLP logs protobuf"),
        (b"not gzip", {**JSON, "content-encoding": "gzip"}, 400, "not valid gzip"),
        (b"{}", {**JSON, "content-encoding": "br"}, 415, "'br' is not supported"),
        (b"{}", {"content-type": "text/plain"}, 415, "Content-Type must be"),
    ],
)
def test_a_bad_body_gets_the_otlp_error_answer(
    client: TestClient, body: bytes, headers: dict[str, str], status: int, problem: str
) -> None:
    answer = client.post("/v1/logs", content=body, headers=headers)
    assert answer.status_code == status, answer.text
    if headers["content-type"] == "application/x-protobuf":
        # google.rpc.Status: code 3 (field 1), then the message (field 2).
        assert answer.content.startswith(b"\x08\x03\x12")
        assert problem.encode() in answer.content
    else:
        assert answer.json()["code"] == 3
        assert problem in answer.json()["message"]


def test_a_gzip_bomb_is_refused_past_the_hook_cap(client: TestClient) -> None:
    bomb = gzip.compress(b"{" + b" " * (17 * 1024 * 1024) + b"}")
    answer = client.post("/v1/logs", content=bomb, headers={**JSON, "content-encoding": "gzip"})
    assert answer.status_code == 413 and "inflates beyond" in answer.json()["message"]


def test_the_read_models_rebuild_to_the_same_usage(client: TestClient) -> None:
    start_claude_session(client, CLAUDE_NATIVE)
    export_logs(client, CLAUDE_LOGS)
    answer = export_logs(client, GEMINI_LOGS)
    before = read(client, "/api/usage", answer, groupBy="session")["items"]
    services = client.app.state.services  # type: ignore[attr-defined]
    reports = replay(services.app, services.store, services.projections, swap=True)
    assert [r.name for r in reports if r.drift] == []
    assert read(client, "/api/usage", groupBy="session")["items"] == before


def test_a_deleted_sessions_usage_leaves_the_read_models(client: TestClient) -> None:
    session_id = start_claude_session(client, CLAUDE_NATIVE)
    export_logs(client, CLAUDE_LOGS)
    deleted = client.delete(f"/api/sessions/{session_id}")
    assert deleted.status_code == 204
    answer = export_logs(client, with_session(CLAUDE_LOGS, CLAUDE_NATIVE) | {})
    assert read(client, "/api/usage", answer)["items"] == []


# Credentials: the receiver is a hook route.

ADMIN = "usage-admin-key-0123456789abcdef"


@pytest.fixture
def secured(settings: Settings) -> Any:
    with TestClient(create_app(settings.with_(api_key=ADMIN))) as client:
        yield client


def issue(client: TestClient, role: str, **binding: str) -> str:
    answer = client.post(
        "/api/keys",
        json={"role": role, "label": "-".join((role, *binding.values())), **binding},
        headers={"x-tachograph-key": ADMIN},
    )
    assert answer.status_code == 201, answer.text
    return str(answer.json()["secret"])


def test_the_receiver_takes_an_agent_token_and_nothing_less(secured: TestClient) -> None:
    body = json.dumps(CLAUDE_LOGS)
    assert secured.post("/v1/logs", content=body, headers=JSON).status_code == 401
    reader = issue(secured, "reader")
    refused = secured.post("/v1/logs", content=body, headers={**JSON, "x-tachograph-key": reader})
    assert refused.status_code == 403
    agent = issue(secured, "agent", workspaceId="default")
    taken = secured.post("/v1/logs", content=body, headers={**JSON, "x-tachograph-key": agent})
    assert (taken.status_code, taken.json()) == (200, {})
    usage = secured.get(
        "/api/usage",
        params={"minPosition": taken.headers["x-tachograph-position"]},
        headers={"x-tachograph-key": reader},
    )
    assert usage.json()["items"][0]["requests"] == 2


def test_a_bound_token_writes_only_its_own_workspace(
    secured: TestClient, settings: Settings
) -> None:
    admin = {"x-tachograph-key": ADMIN}
    for slug in ("team-a", "team-b"):
        (settings.workspace_root / slug).mkdir()
        registered = secured.post("/api/workspaces", json={"id": slug, "path": slug}, headers=admin)
        assert registered.status_code in (200, 201), registered.text
    created = secured.post("/api/sessions", json={"workspaceId": "team-b"}, headers=admin)
    other = created.json()["id"]
    token = issue(secured, "agent", workspaceId="team-a")
    headers = {**JSON, "x-tachograph-key": token}
    # Its own runtime session: recorded in its workspace.
    taken = secured.post("/v1/logs", content=json.dumps(CLAUDE_LOGS), headers=headers)
    assert (taken.status_code, taken.json()) == (200, {})
    # Another workspace's session, named explicitly: refused record by record.
    refused = secured.post(
        "/v1/logs",
        content=json.dumps(with_session(CLAUDE_LOGS, "other-1")),
        headers={**headers, "x-tachograph-session-id": other},
    )
    assert refused.status_code == 200
    partial = refused.json()["partialSuccess"]
    assert partial["rejectedLogRecords"] == "2"
    assert "in another workspace" in partial["errorMessage"]
    # Naming another workspace outright is the hook routes' 403.
    named = secured.post(
        "/v1/logs",
        content=json.dumps(CLAUDE_LOGS),
        headers={**headers, "x-tachograph-workspace": "team-b"},
    )
    assert named.status_code == 403
    usage = secured.get(
        "/api/usage",
        params={"groupBy": "workspace", "minPosition": taken.headers["x-tachograph-position"]},
        headers=admin,
    )
    assert [(i["key"], i["requests"]) for i in usage.json()["items"]] == [("team-a", 2)]


def test_the_cli_prints_what_the_api_answers(client: TestClient, settings: Settings) -> None:
    start_claude_session(client, CLAUDE_NATIVE)
    export_logs(client, CLAUDE_LOGS)
    answer = export_logs(client, GEMINI_LOGS)
    expected = read(client, "/api/usage", answer, groupBy="agent")["items"]
    ndjson = run_cli(settings, "usage", "--group-by", "agent", "--format", "ndjson")
    assert ndjson.returncode == 0, ndjson.stderr
    assert [json.loads(line) for line in ndjson.stdout.splitlines()] == expected
    table = run_cli(settings, "usage", "--group-by", "agent", "--since", "2026-12-06T06:28:00Z")
    assert table.returncode == 0, table.stderr
    header, *rows = table.stdout.splitlines()
    assert header.split() == ["agent", *(k for k in TWO_REQUESTS)]
    assert [row.split() for row in rows] == [["gemini-cli", "1", "100", "10", "0", "0", "0.000000"]]
    refused = run_cli(settings, "usage", "--since", "last tuesday")
    assert refused.returncode == 2 and "--since" in refused.stderr


def test_traces_are_taken_and_not_kept(client: TestClient) -> None:
    span = {"traceId": "5b8efff798038103d269b633813fc60c", "spanId": "eee19b7ec3c1b174"}
    body = {"resourceSpans": [{"scopeSpans": [{"spans": [{**span, "name": "llm_call"}]}]}]}
    taken = client.post("/v1/traces", content=json.dumps(body), headers=JSON)
    assert (taken.status_code, taken.json()) == (200, {})
    empty = client.post("/v1/traces", content=b"", headers=PROTOBUF)
    assert (empty.status_code, empty.content) == (200, b"")
    assert read(client, "/api/usage")["items"] == []


def test_the_figures_budgets_read_come_from_memory_within_a_second(client: TestClient) -> None:
    figures = client.app.state.services.usage_figures  # type: ignore[attr-defined]
    session_id = start_claude_session(client, CLAUDE_NATIVE)
    nothing = figures.for_call(session_id, "default")
    assert nothing["session"]["requests"] == 0 and nothing["workspace"]["today"]["costUsd"] == 0
    answer = export_logs(client, CLAUDE_LOGS)
    read(client, "/api/usage", answer)  # in the read model: the follower adds it within 1 s
    deadline = time.monotonic() + 3
    while figures.for_call(session_id, "default")["session"]["requests"] < 2:
        assert time.monotonic() < deadline, "the figures did not follow the read model"
        time.sleep(0.05)
    seen = figures.for_call(session_id, "default")
    assert {k: v for k, v in seen["session"].items() if k != "today"} == TWO_REQUESTS
    assert seen["workspace"]["costUsd"] == 0.0012
    # The captured requests were made on 2026-12-06 (UTC): today's only on that day.
    today = datetime.now(UTC).strftime("%Y-%m-%d") == "2026-12-06"
    assert seen["session"]["today"]["requests"] == (2 if today else 0)
    assert figures.for_call(str(uuid.uuid4()), "elsewhere")["workspace"]["requests"] == 0


def test_at_a_new_utc_day_todays_figures_start_again_and_totals_stay(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    from services import usage_figures

    figures = client.app.state.services.usage_figures  # type: ignore[attr-defined]
    session_id = start_claude_session(client, CLAUDE_NATIVE)
    monkeypatch.setattr(usage_figures, "_today", lambda: "2026-12-06")  # the requests' day
    read(client, "/api/usage", export_logs(client, CLAUDE_LOGS))
    figures.refresh()
    before = figures.for_call(session_id, "default")
    assert (before["session"]["requests"], before["session"]["today"]["requests"]) == (2, 2)
    monkeypatch.setattr(usage_figures, "_today", lambda: "2026-12-07")
    figures.refresh()
    after = figures.for_call(session_id, "default")
    assert (after["session"]["requests"], after["session"]["today"]["requests"]) == (2, 0)
    assert after["workspace"]["costUsd"] == 0.0012 and after["workspace"]["today"]["costUsd"] == 0


def test_what_a_store_cannot_hold_is_cleaned_from_the_values_kept(client: TestClient) -> None:
    text = json.dumps(with_session(CLAUDE_LOGS, "nul-1"))
    # A NUL (PostgreSQL text cannot hold it) and a lone surrogate in values that are kept,
    # and in one that is not.
    text = text.replace('"claude-opus-5-5"', '"claude\\u0000opus\\ud800"', 1)
    text = text.replace('"user.id"', '"user\\u0000.id"', 1)
    answer = client.post("/v1/logs", content=text.encode(), headers=JSON)
    assert (answer.status_code, answer.json()) == (200, {})
    models = [i["key"] for i in read(client, "/api/usage", answer, groupBy="model")["items"]]
    assert sorted(models) == ["claude-opus-5-5", "claudeopus?"]


def test_a_session_bound_token_writes_into_its_own_session_only(secured: TestClient) -> None:
    admin = {"x-tachograph-key": ADMIN}
    own = secured.post("/api/sessions", json={"workspaceId": "default"}, headers=admin).json()
    other = secured.post("/api/sessions", json={"workspaceId": "default"}, headers=admin).json()
    token = issue(secured, "agent", sessionId=own["id"])
    headers = {**JSON, "x-tachograph-key": token}
    taken = secured.post("/v1/logs", content=json.dumps(CLAUDE_LOGS), headers=headers)
    assert (taken.status_code, taken.json()) == (200, {})
    refused = secured.post(
        "/v1/logs",
        content=json.dumps(with_session(CLAUDE_LOGS, "elsewhere-1")),
        headers={**headers, "x-tachograph-session-id": other["id"]},
    )
    partial = refused.json()["partialSuccess"]
    assert partial["rejectedLogRecords"] == "2" and other["id"] in partial["errorMessage"]
    usage = secured.get(
        "/api/usage",
        params={"minPosition": taken.headers["x-tachograph-position"]},
        headers=admin,
    ).json()["items"]
    assert [(i["key"], i["requests"]) for i in usage] == [(own["id"], 2)]


def test_codexs_completed_responses_count_once_each(client: TestClient) -> None:
    export = json.loads((FIXTURES / "codex-0.169.0-logs.json").read_text())
    answer = export_logs(client, export)
    native = "01a24a3f-7883-7dc0-a5fa-a8c7df7b8727"
    # Codex reports every server-sent event; of its two `response.completed` records, the
    # one with the response's token counts is the request.
    items = read(client, "/api/usage", answer, groupBy="session")["items"]
    assert items == [
        {
            "key": str(agent_session_uuid(f"codex:{native}")),
            "requests": 1,
            "inputTokens": 100,
            "outputTokens": 10,
            "cacheReadTokens": 0,
            "cacheCreationTokens": 0,
            "costUsd": 0.0,
        }
    ]
    assert read(client, "/api/usage", groupBy="model")["items"][0]["key"] == "gpt-5.5"


def test_exports_sent_together_commit_together_and_a_repeat_among_them_counts_once(
    client: TestClient,
) -> None:
    """Exports are held for a moment and committed in one transaction; one that repeats
    another of the same transaction is still taken as already recorded, alone."""
    session_id = start_claude_session(client, "together-1")
    exports = [with_prompts(with_session(CLAUDE_LOGS, "together-1"), f"p{i}") for i in range(5)]
    sent = [*exports, exports[0]]
    before = scrape(client)
    start = threading.Barrier(len(sent))

    def send(body: dict[str, Any]) -> Any:
        start.wait()
        return export_logs(client, body)

    with ThreadPoolExecutor(len(sent)) as pool:
        answers = list(pool.map(send, sent))
    after = scrape(client)
    positions = [a.headers.get("x-tachograph-position") for a in answers]
    # One of the two identical exports recorded its requests, the other found them there.
    assert sum(p is None for p in positions[::5]) == 1, positions
    assert all(p is not None for p in positions[1:5]), positions
    last = max(int(p) for p in positions if p is not None)
    usage = read(client, f"/api/sessions/{session_id}", minPosition=last)["usage"]
    assert usage["requests"] == 5 * TWO_REQUESTS["requests"]
    commits = value(after, "tachograph_group_commit_batch_size_count") - value(
        before, "tachograph_group_commit_batch_size_count"
    )
    # One transaction when all arrive within the hold; a second for a straggler that a
    # busy machine scheduled late. Each alone (the hooks' path) would be five or six.
    assert commits <= 2, f"{len(sent)} exports took {commits} commits"


def with_prompts(export: dict[str, Any], tag: str) -> dict[str, Any]:
    """The export as if its model requests were other prompts (ids of their own)."""
    changed = copy.deepcopy(export)
    for record in changed["resourceLogs"][0]["scopeLogs"][0]["logRecords"]:
        for attribute in record["attributes"]:
            if attribute["key"] == "prompt.id":
                attribute["value"] = {"stringValue": f"{tag}-{attribute['value']['stringValue']}"}
    return changed
