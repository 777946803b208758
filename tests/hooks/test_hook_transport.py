"""Tests of the outbound hook HTTP transport against a real loopback server."""

from __future__ import annotations

import gzip
import hashlib
import hmac
import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from domain.hook_config import HookHandler
from domain.hook_dispatch import HandlerDecision
from infra.hook_transport import HttpxHookTransport, sign
from infra.hook_wire import parse_handler_response

NOW = 1_700_000_000.0
SECRET = "s3cret-value"
ANSWER = b'{"schemaVersion":1,"outcome":"pass"}'
DRIP_INTERVAL_S = 0.05


@dataclass(frozen=True)
class Recorded:
    """One request as the server saw it."""

    path: str
    headers: list[tuple[str, str]]
    body: bytes
    client_port: int


class HookServer(ThreadingHTTPServer):
    """Loopback hook server whose behaviour is chosen by the request path."""

    daemon_threads = False  # server_close() joins handler threads: nothing outlives a test
    block_on_close = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.recorded: list[Recorded] = []
        self.release = threading.Event()
        self.streamed = 0

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}{path}"


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, so the client pool is exercised
    server: HookServer

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        """Keep test output quiet."""

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("content-length", "0")))
        self.server.recorded.append(
            Recorded(self.path, list(self.headers.items()), body, self.client_address[1])
        )
        route = getattr(self, "route_" + self.path.strip("/").split("?")[0])
        try:
            route()
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True  # the client hung up, as it should when it gives up

    def _answer(self, status: int, body: bytes, *extra: tuple[str, str]) -> None:
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        for name, value in extra:
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)

    def route_ok(self) -> None:
        self._answer(200, ANSWER, ("set-cookie", "tracker=1; Path=/"))

    def route_status500(self) -> None:
        self._answer(500, b'{"error":"boom"}')

    def route_redirect(self) -> None:
        self._answer(302, b"", ("location", "/ok"))

    def route_gzip(self) -> None:
        self._answer(200, gzip.compress(ANSWER), ("content-encoding", "gzip"))

    def route_exactcap(self) -> None:
        self._answer(200, b" " * 65536)

    def route_declaredhuge(self) -> None:
        self.send_response(200)
        self.send_header("content-length", str(10 * 1024 * 1024))
        self.end_headers()
        self.wfile.write(b"x" * 1024)
        self.close_connection = True

    def route_slow(self) -> None:
        self.server.release.wait(5)
        self._answer(200, ANSWER)

    def route_drip(self) -> None:
        """Headers at once, then one body byte per interval: every read is quick."""
        self.send_response(200)
        self.send_header("content-length", "1000")
        self.end_headers()
        self.close_connection = True
        for _ in range(1000):
            if self.server.release.wait(DRIP_INTERVAL_S):
                return
            self.wfile.write(b" ")
            self.wfile.flush()

    def route_dripheaders(self) -> None:
        """The status line and headers themselves arrive one byte per interval."""
        self.close_connection = True
        for byte in b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nx-padding: " + b"p" * 500:
            if self.server.release.wait(DRIP_INTERVAL_S):
                return
            self.wfile.write(bytes([byte]))
            self.wfile.flush()

    def route_huge(self) -> None:
        """A chunked body that never ends until the client hangs up."""
        self.send_response(200)
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        self.close_connection = True
        chunk = b"x" * 16384
        while self.server.streamed < 64 * 1024 * 1024 and not self.server.release.is_set():
            self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            self.server.streamed += len(chunk)


@pytest.fixture
def server() -> Iterator[HookServer]:
    srv = HookServer()
    thread = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.01})
    thread.start()
    try:
        yield srv
    finally:
        srv.release.set()
        srv.shutdown()
        srv.server_close()
        thread.join()


@pytest.fixture
def transport() -> Iterator[HttpxHookTransport]:
    with HttpxHookTransport({"HOOK_SECRET": SECRET}, clock=lambda: NOW) as hook_transport:
        yield hook_transport


def handler(url: str, *, timeout_ms: int = 2000, secret_env: str | None = None) -> HookHandler:
    return HookHandler(
        id="tool-policy",
        event="PreToolUse",
        url=url,
        matcher=None,
        timeout_ms=timeout_ms,
        failure_mode="closed",
        secret_env=secret_env,
    )


def header_names(recorded: Recorded) -> list[str]:
    return sorted(name.lower() for name, _ in recorded.headers)


def header(recorded: Recorded, name: str) -> str:
    (value,) = [v for k, v in recorded.headers if k.lower() == name]
    return value


def timed(call: Callable[[], object]) -> float:
    started = time.monotonic()
    call()
    return time.monotonic() - started


def test_normal_answer(server: HookServer, transport: HttpxHookTransport) -> None:
    body = b'{"schemaVersion":1,"event":"PreToolUse"}'
    reply = transport.call(handler(server.url("/ok?x=1")), body)
    assert (reply.status, reply.body, reply.failure) == (200, ANSWER, None)
    assert reply.duration_ms > 0
    assert isinstance(
        parse_handler_response("PreToolUse", reply.status, reply.body), HandlerDecision
    )
    (recorded,) = server.recorded
    assert recorded.path == "/ok?x=1"
    assert recorded.body == body


def test_unsigned_request_sends_only_content_type(
    server: HookServer, transport: HttpxHookTransport
) -> None:
    transport.call(handler(server.url("/ok")), b"{}")
    (recorded,) = server.recorded
    # host and content-length are mandated by HTTP/1.1 framing; nothing else may be added.
    assert header_names(recorded) == ["content-length", "content-type", "host"]
    assert header(recorded, "content-type") == "application/json"


def test_signed_request_headers_and_hmac(server: HookServer, transport: HttpxHookTransport) -> None:
    body = b'{"schemaVersion":1,"eventId":"e1"}'
    reply = transport.call(handler(server.url("/ok"), secret_env="HOOK_SECRET"), body)
    assert reply.failure is None
    (recorded,) = server.recorded
    assert header_names(recorded) == [
        "content-length",
        "content-type",
        "host",
        "x-tachograph-signature",
        "x-tachograph-timestamp",
    ]
    timestamp = header(recorded, "x-tachograph-timestamp")
    assert timestamp == "1700000000"
    expected = hmac.new(
        SECRET.encode(), timestamp.encode() + b"." + recorded.body, hashlib.sha256
    ).hexdigest()
    assert header(recorded, "x-tachograph-signature") == f"sha256={expected}"
    assert sign(SECRET, timestamp, body) == f"sha256={expected}"


def test_missing_secret_is_configuration_failure_and_sends_nothing(
    server: HookServer, transport: HttpxHookTransport
) -> None:
    reply = transport.call(handler(server.url("/ok"), secret_env="UNSET_SECRET"), b"{}")
    assert (reply.status, reply.body, reply.failure) == (None, None, "configuration")
    assert server.recorded == []


def test_cookies_are_never_sent_back_and_connections_are_pooled(
    server: HookServer, transport: HttpxHookTransport
) -> None:
    for _ in range(3):
        assert transport.call(handler(server.url("/ok")), b"{}").status == 200
    assert all("cookie" not in header_names(r) for r in server.recorded)
    assert len({r.client_port for r in server.recorded}) == 1


def test_non_2xx_is_returned_for_the_parser(
    server: HookServer, transport: HttpxHookTransport
) -> None:
    reply = transport.call(handler(server.url("/status500")), b"{}")
    assert (reply.status, reply.body, reply.failure) == (500, b'{"error":"boom"}', None)
    failure = parse_handler_response("PreToolUse", reply.status, reply.body)
    assert not isinstance(failure, HandlerDecision)
    assert failure.failure == "status"


def test_redirects_are_not_followed(server: HookServer, transport: HttpxHookTransport) -> None:
    reply = transport.call(handler(server.url("/redirect")), b"{}")
    assert (reply.status, reply.failure) == (302, None)
    assert [r.path for r in server.recorded] == ["/redirect"]


def test_slow_handler_times_out(server: HookServer, transport: HttpxHookTransport) -> None:
    reply = transport.call(handler(server.url("/slow"), timeout_ms=200), b"{}")
    assert (reply.status, reply.body, reply.failure) == (None, None, "timeout")
    assert 150 <= reply.duration_ms < 1000


def test_slow_drip_body_is_bounded_by_total_deadline(
    server: HookServer, transport: HttpxHookTransport
) -> None:
    # Each byte comes well within any per-read timeout; only a total deadline stops this.
    reply = transport.call(handler(server.url("/drip"), timeout_ms=300), b"{}")
    assert reply.failure == "timeout"
    assert reply.body is None
    assert 250 <= reply.duration_ms < 1000


def test_slow_drip_headers_are_bounded_by_total_deadline(
    server: HookServer, transport: HttpxHookTransport
) -> None:
    reply = transport.call(handler(server.url("/dripheaders"), timeout_ms=300), b"{}")
    assert reply.failure == "timeout"
    assert 250 <= reply.duration_ms < 1000


def test_pool_recovers_after_timeout(server: HookServer, transport: HttpxHookTransport) -> None:
    assert transport.call(handler(server.url("/slow"), timeout_ms=100), b"{}").failure == "timeout"
    reply = transport.call(handler(server.url("/ok")), b"{}")
    assert (reply.status, reply.failure) == (200, None)


def test_streamed_body_over_cap_is_cut_off(
    server: HookServer, transport: HttpxHookTransport
) -> None:
    reply = transport.call(handler(server.url("/huge"), timeout_ms=5000), b"{}")
    assert (reply.status, reply.body, reply.failure) == (200, None, "over_cap")
    assert reply.duration_ms < 2000
    # The server only got rid of what socket buffers absorbed before the client hung up.
    assert server.streamed < 64 * 1024 * 1024


def test_declared_length_over_cap_fails_without_reading(
    server: HookServer, transport: HttpxHookTransport
) -> None:
    reply = transport.call(handler(server.url("/declaredhuge")), b"{}")
    assert (reply.status, reply.failure) == (200, "over_cap")


def test_body_of_exactly_the_cap_is_accepted(
    server: HookServer, transport: HttpxHookTransport
) -> None:
    reply = transport.call(handler(server.url("/exactcap")), b"{}")
    assert reply.failure is None
    assert reply.body is not None
    assert len(reply.body) == 65536


def test_compressed_answers_are_refused(server: HookServer, transport: HttpxHookTransport) -> None:
    reply = transport.call(handler(server.url("/gzip")), b"{}")
    assert (reply.status, reply.body, reply.failure) == (200, None, "malformed")


def test_connection_refused_is_transport_failure(transport: HttpxHookTransport) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    reply = transport.call(handler(f"http://127.0.0.1:{port}/ok", timeout_ms=1000), b"{}")
    assert (reply.status, reply.body, reply.failure) == (None, None, "transport")


def test_call_after_close_does_not_raise(server: HookServer) -> None:
    closed = HttpxHookTransport({})
    closed.close()
    reply = closed.call(handler(server.url("/ok")), b"{}")
    assert reply.failure == "transport"


def test_concurrent_calls_keep_their_own_deadlines(
    server: HookServer, transport: HttpxHookTransport
) -> None:
    results: dict[str, str | None] = {}

    def run(name: str, path: str, timeout_ms: int) -> None:
        reply = transport.call(handler(server.url(path), timeout_ms=timeout_ms), b"{}")
        results[name] = reply.failure

    threads = [
        threading.Thread(target=run, args=("slow", "/slow", 150)),
        threading.Thread(target=run, args=("ok", "/ok", 5000)),
    ]

    def run_all() -> None:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

    elapsed = timed(run_all)
    assert results == {"slow": "timeout", "ok": None}
    assert elapsed < 2


def test_request_body_is_sent_verbatim_as_json(
    server: HookServer, transport: HttpxHookTransport
) -> None:
    body = json.dumps({"detail": {"prompt": "héllo"}}, ensure_ascii=False).encode()
    transport.call(handler(server.url("/ok")), body)
    assert server.recorded[0].body == body
    assert header(server.recorded[0], "content-length") == str(len(body))
