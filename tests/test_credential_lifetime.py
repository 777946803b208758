"""A credential is checked for the whole life of a request: an open stream ends within
a second of its key's revocation or expiry, on the replica that revoked it and on every
other (docs/credentials.md)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path

import httpx
import pytest

from infra.settings import Settings
from tests.support import Server
from tests.test_live_stream import Message, parse

ADMIN_KEY = "credential-lifetime-admin-key"
ADMIN = {"x-tachograph-key": ADMIN_KEY}
# Long enough to open the stream and see one message, short enough for a test.
SHORT_EXPIRY = "3s"


def start(settings: Settings, tmp_path: Path, name: str) -> Server:
    server = Server(settings.with_(api_key=ADMIN_KEY), tmp_path / f"{name}.log")
    server.wait_ready(timeout=60, headers=ADMIN)
    return server


@pytest.fixture
def server(settings: Settings, tmp_path: Path) -> Iterator[Server]:
    started = start(settings, tmp_path, "serve")
    try:
        yield started
    finally:
        started.kill()


def issue_reader(base: str, **body: str) -> tuple[str, str, dict[str, object]]:
    label = f"reader-{time.monotonic_ns()}"
    issued = httpx.post(
        f"{base}/api/keys", headers=ADMIN, json={"label": label, "role": "reader", **body}
    )
    assert issued.status_code == 201, issued.text
    return label, issued.json()["secret"], issued.json()


def session(base: str) -> str:
    created = httpx.post(f"{base}/api/sessions", headers=ADMIN, json={"workspaceId": "default"})
    assert created.status_code == 201, created.text
    return str(created.json()["id"])


def rename(base: str, session_id: str, title: str) -> int:
    renamed = httpx.patch(f"{base}/api/sessions/{session_id}", headers=ADMIN, json={"title": title})
    assert renamed.status_code == 200, renamed.text
    return int(renamed.headers["x-tachograph-position"])


def seen(messages: Iterator[Message], position: int) -> None:
    for message in messages:
        if message.id is not None and message.id >= position:
            return
    raise AssertionError(f"the stream ended before position {position}")


def rest_of(messages: Iterator[Message]) -> list[Message]:
    """Every message until the stream ends; a stream that goes on is a read timeout."""
    try:
        return list(messages)
    except httpx.ReadTimeout:
        raise AssertionError("the stream was still open 5 s after its key stopped") from None


def stream_until_refused(
    stream_base: str, secret: str, stop: Callable[[], None], write_base: str
) -> tuple[list[Message], float]:
    """Open a stream with `secret`, see a message, run `stop`; what followed, and when the
    stream ended (monotonic)."""
    session_id = session(write_base)
    with (
        # A read timeout well under the 15 s keep-alive: a stream that is never ended fails.
        httpx.Client(base_url=stream_base, timeout=5) as client,
        client.stream("GET", "/api/stream", headers={"x-tachograph-key": secret}) as response,
    ):
        assert response.status_code == 200, response.read()
        messages = parse(response)
        seen(messages, rename(write_base, session_id, "before"))
        stop()
        rest = rest_of(messages)
        ended = time.monotonic()
    # Events after the stop are not delivered: the stream is over.
    rename(write_base, session_id, "after")
    return rest, ended


def refusal(rest: list[Message], reason: str) -> None:
    assert rest, "the stream ended without saying why"
    assert all(m.data.get("title") != "after" for m in rest)
    last = rest[-1]
    assert last.event == "unauthorized", rest
    assert last.data["error"] == "unauthorized" and last.data["reason"] == reason


def test_an_open_stream_ends_within_a_second_of_its_key_being_revoked(server: Server) -> None:
    label, secret, _ = issue_reader(server.url)
    revoked_at = 0.0

    def revoke() -> None:
        nonlocal revoked_at
        answer = httpx.post(f"{server.url}/api/keys/{label}/revoke", headers=ADMIN, json={})
        assert answer.status_code == 200, answer.text
        revoked_at = time.monotonic()

    rest, ended = stream_until_refused(server.url, secret, revoke, server.url)
    assert ended - revoked_at < 1.0
    refusal(rest, "revoked")
    again = httpx.get(f"{server.url}/api/stream", headers={"x-tachograph-key": secret})
    assert again.status_code == 401 and again.json()["reason"] == "revoked"


def test_an_open_stream_ends_within_a_second_of_its_key_expiring(server: Server) -> None:
    _, secret, issued = issue_reader(server.url, expiresIn=SHORT_EXPIRY)
    expires = datetime.fromisoformat(str(issued["expiresAt"]).replace("Z", "+00:00"))

    def wait_for_expiry() -> None:
        pass  # the stream is read on: it must end by itself

    rest, ended = stream_until_refused(server.url, secret, wait_for_expiry, server.url)
    ended_at = time.time() - (time.monotonic() - ended)
    assert ended_at - expires.timestamp() < 1.0
    assert ended_at >= expires.timestamp() - 0.1  # not cut before the key expired
    refusal(rest, "expired")


@pytest.mark.parametrize("store_kind", ["postgres"], indirect=True)
def test_a_revocation_on_one_replica_ends_a_stream_open_on_another(
    settings: Settings, tmp_path: Path
) -> None:
    revoking, streaming = (start(settings, tmp_path, name) for name in ("serve-a", "serve-b"))
    try:
        label, secret, _ = issue_reader(revoking.url)
        revoked_at = 0.0

        def revoke() -> None:
            nonlocal revoked_at
            answer = httpx.post(f"{revoking.url}/api/keys/{label}/revoke", headers=ADMIN, json={})
            assert answer.status_code == 200, answer.text
            revoked_at = time.monotonic()

        # Written on the revoking replica, streamed from the other: both follow one log.
        rest, ended = stream_until_refused(streaming.url, secret, revoke, revoking.url)
        assert ended - revoked_at < 1.0
        refusal(rest, "revoked")
    finally:
        revoking.kill()
        streaming.kill()
