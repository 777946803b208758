"""Structured logs: one JSON object per line, correlation ids, no secrets or prompts."""

from __future__ import annotations

import io
import json
import logging
import signal
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from infra.logs import configure_logging, log_context
from infra.settings import Settings
from tests.support import Server

API_KEY = "key-" + "k" * 28
PROMPT_MARKER = "PROMPT-MARKER-please-never-log-me"


@pytest.fixture
def captured() -> Iterator[io.StringIO]:
    """The root logger as `tachograph serve` configures it, writing to a buffer."""
    root = logging.getLogger()
    saved = root.handlers[:], root.level
    configure_logging("INFO", secrets=[API_KEY, "short"])
    buffer = io.StringIO()
    root.handlers[0].setStream(buffer)  # type: ignore[attr-defined]
    yield buffer
    root.handlers[:], level = saved
    root.setLevel(level)
    configure_logging.__globals__["_secrets"] = ()


def lines(buffer: io.StringIO) -> list[dict[str, object]]:
    return [json.loads(line) for line in buffer.getvalue().splitlines()]


def test_every_line_is_one_json_object_with_bound_ids(captured: io.StringIO) -> None:
    log = logging.getLogger("tachograph.test")
    with log_context(task_id="t-1", turn_id="turn-9"):
        log.info("first")
        with log_context(session_id="s-2"):
            log.warning("second\nspans lines", extra={"dispatch_id": "d-3"})
    log.info("third")
    first, second, third = lines(captured)
    assert first["message"] == "first" and first["level"] == "info"
    assert (first["task_id"], first["turn_id"]) == ("t-1", "turn-9")
    assert "session_id" not in first
    assert (second["session_id"], second["dispatch_id"]) == ("s-2", "d-3")
    assert second["message"] == "second\nspans lines"
    assert not {"task_id", "turn_id", "session_id"} & set(third)


def test_ids_bound_in_one_thread_do_not_leak_into_another(captured: io.StringIO) -> None:
    log = logging.getLogger("tachograph.test")
    with log_context(task_id="mine"):
        worker = threading.Thread(target=lambda: log.info("other thread"))
        worker.start()
        worker.join()
    (entry,) = lines(captured)
    assert "task_id" not in entry


def test_secrets_and_bearer_tokens_are_scrubbed(captured: io.StringIO) -> None:
    log = logging.getLogger("tachograph.test")
    log.warning("key=%s auth=Bearer abcdefghijklmnop.qrs", API_KEY)
    try:
        raise ValueError(f"failed with {API_KEY}")
    except ValueError:
        log.exception("boom")
    text = captured.getvalue()
    assert API_KEY not in text and "abcdefghijklmnop" not in text
    assert "[redacted]" in lines(captured)[0]["message"]  # type: ignore[operator]
    assert "short" not in [e["message"] for e in lines(captured)]  # short values are not secrets


def test_request_id_is_echoed_or_minted(settings: Settings) -> None:
    with TestClient(create_app(settings), raise_server_exceptions=False) as client:
        given = client.get("/api/health", headers={"x-request-id": "req-42.a:b"})
        assert given.headers["x-request-id"] == "req-42.a:b"
        minted = client.get("/api/health", headers={"x-request-id": "bad id\twith spaces"})
        assert minted.headers["x-request-id"] != "bad id\twith spaces"
        assert len(minted.headers["x-request-id"]) == 32
        refused = client.post(
            "/api/sessions",
            content=b"{",
            headers={"x-request-id": "r-400", "content-type": "application/json"},
        )
        assert refused.status_code == 400 and refused.headers["x-request-id"] == "r-400"


@pytest.mark.slow
def test_serve_logs_json_lines_with_request_ids_and_no_prompts_or_keys(
    settings: Settings, tmp_path: Path
) -> None:
    server = Server(
        settings.with_(api_key=API_KEY),
        tmp_path / "serve.log",
        {"TACHOGRAPH_ACCESS_LOG": "1"},
    )
    try:
        server.wait_ready(headers={"x-tachograph-key": API_KEY})
        headers = {"x-tachograph-key": API_KEY}
        with httpx.Client(base_url=server.url, headers=headers, timeout=10) as http:
            created = http.post(
                "/api/sessions", json={"workspaceId": "default"}, headers={"x-request-id": "rq-1"}
            )
            session_id = created.json()["id"]
            http.post(
                f"/api/sessions/{session_id}/events",
                json={"event": "UserPromptSubmit", "prompt": PROMPT_MARKER + "\nmore"},
                headers={"x-request-id": "rq-2"},
            )
            http.post("/api/tasks", json={"workspaceId": "default", "prompt": PROMPT_MARKER})
            http.get(f"/api/sessions/{session_id}", headers={"x-request-id": "rq-3"})
            http.get("/api/health", headers={"x-tachograph-key": "wrong"})
    finally:
        server.signal(signal.SIGTERM)  # a clean stop flushes the last requests' lines
        server.wait(15)
    output = server.output()
    entries = [json.loads(line) for line in output.splitlines() if line.strip()]
    access = [e for e in entries if e["logger"] == "tachograph.access"]
    # Start-up at info is a few lines: not one per scheduled job; the signing-key warning once.
    assert not [e for e in entries if e["logger"].startswith("apscheduler")], entries[:5]
    assert sum("TACHOGRAPH_LOG_SIGNING_KEY is unset" in e["message"] for e in entries) == 1
    by_id = {e.get("request_id"): e for e in access}
    assert by_id["rq-1"]["route"] == "/api/sessions" and by_id["rq-1"]["status"] == 201
    assert by_id["rq-2"]["route"] == "/api/sessions/{session_id}/events"
    assert by_id["rq-3"]["session_id"] == session_id
    assert any(e["status"] == 401 for e in access)
    assert all(isinstance(e["durationMs"], float | int) for e in access)
    assert PROMPT_MARKER not in output
    assert API_KEY not in output
