"""What an unauthenticated or slow client can hold of a real `serve`: the credential is
checked from the headers before any body is read, an unauthenticated body costs no more
than a small bounded buffer, and headers and bodies have read deadlines (docs/operations.md).
"""

from __future__ import annotations

import socket
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support import Server
from tests.test_live_stream import ADMIN_KEY, settings_for

HEADER_TIMEOUT_S = 1.0
BODY_TIMEOUT_S = 2.0
DECLARED = 14 * 1024 * 1024  # under the hook routes' 16 MiB cap: refused only by its key
CODER_SECRET = "c" * 40
HOOK_ROUTES = (
    f"/api/sessions/{uuid.uuid4()}/events",
    "/hooks/claude",
    "/hooks/codex",
    "/hooks/copilot/PreToolUse",
    "/hooks/coder",  # its own signed token, checked from the headers too
)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    base = tmp_path_factory.mktemp("http-edge")
    settings = settings_for("sqlite", base)  # the HTTP server's behaviour: one store is enough
    env = {
        "TACHOGRAPH_HTTP_HEADER_TIMEOUT_S": str(HEADER_TIMEOUT_S),
        "TACHOGRAPH_HTTP_BODY_TIMEOUT_S": str(BODY_TIMEOUT_S),
        "TACHOGRAPH_CODER_HOOK_SECRET": CODER_SECRET,
        "TACHOGRAPH_CODER_HOOK_URL": "http://127.0.0.1/hooks/coder",
    }
    started = Server(settings, Path(base / "serve.log"), env)
    try:
        started.wait_ready(headers={"x-tachograph-key": ADMIN_KEY})
        yield started
    finally:
        started.kill()


def connect(server: Server) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=5)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
    return sock


def head(path: str, length: int, key: str | None = None, method: str = "POST") -> bytes:
    lines = [
        f"{method} {path} HTTP/1.1",
        "host: 127.0.0.1",
        "content-type: application/json",
        f"content-length: {length}",
    ]
    if key is not None:
        lines.append(f"x-tachograph-key: {key}")
    if path == "/hooks/coder":
        lines.append("authorization: Bearer not.a.token")
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def answer(sock: socket.socket) -> bytes:
    """What the server sent until it closed the connection or 5 s passed."""
    received = b""
    try:
        while chunk := sock.recv(65536):
            received += chunk
    except TimeoutError:
        pass
    return received


def status_line(sock: socket.socket) -> bytes:
    """The first line of the answer, as soon as it arrives (the connection may stay open)."""
    received = b""
    while b"\r\n" not in received:
        chunk = sock.recv(4096)
        assert chunk, f"closed without an answer: {received!r}"
        received += chunk
    return received.split(b"\r\n", 1)[0]


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


@pytest.mark.parametrize("key", [None, "tgk_" + "x" * 43], ids=["no key", "unknown key"])
def test_an_unauthenticated_hook_is_refused_from_its_headers_before_its_body(
    server: Server, key: str | None
) -> None:
    for path in HOOK_ROUTES:
        with connect(server) as sock:
            # Headers declaring 14 MiB and a first kilobyte: the rest is never sent.
            sock.sendall(head(path, DECLARED, key) + b"{" + b" " * 1023)
            started = time.monotonic()
            assert status_line(sock) == b"HTTP/1.1 401 Unauthorized", path
            assert time.monotonic() - started < 2, path


def test_ten_unauthenticated_bodies_do_not_grow_the_server(server: Server) -> None:
    pid = server.popen.pid
    before = rss_kib(pid)
    sent = b"x" * (DECLARED - 1024 * 1024)  # all but the last MiB: the body never ends
    held = []
    try:
        for n in range(10):
            sock = connect(server)
            held.append(sock)
            sock.sendall(head(HOOK_ROUTES[n % 2], DECLARED) + sent)
        time.sleep(0.5)
        grown = rss_kib(pid) - before
    finally:
        for sock in held:
            sock.close()
    assert grown < 8 * 1024, f"serve grew by {grown} KiB holding ten unauthenticated bodies"


def test_headers_sent_a_line_at_a_time_are_cut_at_the_header_deadline(server: Server) -> None:
    with connect(server) as sock:
        started = time.monotonic()
        sock.sendall(b"GET /api/health HTTP/1.1\r\nhost: 127.0.0.1\r\n")
        received = b""
        sock.settimeout(0.3)
        for n in range(30):  # a header line every 0.3 s: never done
            try:
                sock.sendall(b"x-slow-%d: 1\r\n" % n)
                received += sock.recv(4096)
                if received:
                    break
            except TimeoutError:
                continue
            except OSError:
                break
        sock.settimeout(5)
        received += answer(sock)
        cut = time.monotonic() - started
    assert received.startswith(b"HTTP/1.1 408 Request Timeout"), received
    assert b'"error": "request_timeout"' in received and b"headers" in received
    assert HEADER_TIMEOUT_S - 0.1 <= cut < HEADER_TIMEOUT_S + 1.5


def test_headers_without_end_are_refused_once_they_pass_64_kib(server: Server) -> None:
    with connect(server) as sock:
        sock.sendall(b"GET /api/health HTTP/1.1\r\nhost: 127.0.0.1\r\nx-big: ")
        sent = 0
        try:
            while sent < 16 * 1024 * 1024:  # a header that never ends, as fast as it goes
                sock.sendall(b"a" * 65536)
                sent += 65536
        except OSError:
            pass  # the server closed the connection
        received = answer(sock)
    assert received.startswith(b"HTTP/1.1 431 Request Header Fields Too Large"), received
    assert sent < 4 * 1024 * 1024  # cut after a little more than the limit, not read on


def test_a_connection_that_sends_nothing_is_closed_at_the_header_deadline(server: Server) -> None:
    with connect(server) as sock:
        started = time.monotonic()
        received = answer(sock)
        cut = time.monotonic() - started
    assert received.startswith(b"HTTP/1.1 408"), received
    assert cut < HEADER_TIMEOUT_S + 1.5


def test_a_body_sent_a_byte_at_a_time_is_cut_at_the_body_deadline(server: Server) -> None:
    created = httpx.post(
        f"{server.url}/api/sessions",
        headers={"x-tachograph-key": ADMIN_KEY},
        json={"workspaceId": "default"},
    )
    assert created.status_code == 201, created.text
    path = f"/api/sessions/{created.json()['id']}/events"
    logged = head_position(server)
    with connect(server) as sock:
        sock.sendall(head(path, 1000, ADMIN_KEY))
        started = time.monotonic()
        received = drip(sock)
        cut = time.monotonic() - started
    assert received.startswith(b"HTTP/1.1 408 Request Timeout"), received
    assert b"body" in received
    assert BODY_TIMEOUT_S - 0.1 <= cut < BODY_TIMEOUT_S + 1.5
    # Nothing was recorded of it, and the server answers the next client.
    assert head_position(server) == logged


def head_position(server: Server) -> int:
    events = httpx.get(
        f"{server.url}/api/events", headers={"x-tachograph-key": ADMIN_KEY}, params={"limit": 500}
    ).json()["events"]
    return max(int(e["position"]) for e in events)


def test_a_refused_body_dripped_on_is_cut_at_the_body_deadline(server: Server) -> None:
    with connect(server) as sock:
        sock.sendall(head(HOOK_ROUTES[0], DECLARED))
        started = time.monotonic()
        assert status_line(sock) == b"HTTP/1.1 401 Unauthorized"
        drip(sock)
        cut = time.monotonic() - started
    assert cut < BODY_TIMEOUT_S + 1.5


def drip(sock: socket.socket) -> bytes:
    """Send a byte every 0.2 s until the server closes the connection (at most 6 s)."""
    sock.settimeout(0.2)
    received = b""
    for _ in range(30):
        try:
            sock.sendall(b" ")
        except OSError:
            break
        try:
            chunk = sock.recv(4096)
        except TimeoutError:
            continue
        except OSError:
            break
        if not chunk:
            break
        received += chunk
    sock.settimeout(5)
    return received


# --- one send per answer (api/one_send.py) --------------------------------------------


def _segments_in(sock: socket.socket) -> int:
    """TCP segments this socket has received (Linux `tcp_info.tcpi_segs_in`)."""
    info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 256)
    return int.from_bytes(info[140:144], "little")


def _answers(received: bytes) -> list[tuple[bytes, bytes]]:
    """(status line, body) of each answer in a stream of them, by their content-length."""
    out = []
    while received:
        head, _, rest = received.partition(b"\r\n\r\n")
        lines = head.split(b"\r\n")
        fields = dict(line.lower().split(b": ", 1) for line in lines[1:])
        length = int(fields[b"content-length"])
        out.append((lines[0], rest[:length]))
        received = rest[length:]
    return out


def _one_answer(sock: socket.socket, request: bytes) -> tuple[bytes, bytes]:
    """Send `request` and read exactly its answer (the connection stays open)."""
    sock.sendall(request)
    received = b""
    while b"\r\n\r\n" not in received:
        received += sock.recv(65536)
    head = received.partition(b"\r\n\r\n")[0]
    length = int(
        dict(h.lower().split(b": ", 1) for h in head.split(b"\r\n")[1:])[b"content-length"]
    )
    while len(received) < len(head) + 4 + length:
        received += sock.recv(65536)
    ((status, body),) = _answers(received)
    return status, body


def test_each_answer_reaches_its_client_in_one_segment(server: Server) -> None:
    """Head and body leave in one send: a keep-alive client receives one segment per
    answer (uvicorn alone sends two), besides the odd bare acknowledgement."""
    request = (
        f"GET /api/health HTTP/1.1\r\nhost: 127.0.0.1\r\nx-tachograph-key: {ADMIN_KEY}\r\n\r\n"
    ).encode()
    with connect(server) as sock:
        for _ in range(40):  # past the start of the connection, where every segment is
            _one_answer(sock, request)  # acknowledged at once
        before = _segments_in(sock)
        answers = [_one_answer(sock, request) for _ in range(40)]
        received = _segments_in(sock) - before
    assert all(status == b"HTTP/1.1 200 OK" and b'"status"' in body for status, body in answers)
    assert received <= 52, f"{received} segments for 40 answers"


def test_a_client_expecting_100_continue_is_told_to_go_on_before_it_sends_the_body(
    server: Server,
) -> None:
    body = b'{"workspaceId":"default"}'
    request = (
        "POST /api/sessions HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\nexpect: 100-continue\r\n"
        f"x-tachograph-key: {ADMIN_KEY}\r\n\r\n"
    ).encode()
    with connect(server) as sock:
        sock.sendall(request)
        assert status_line(sock) == b"HTTP/1.1 100 Continue"
        sock.sendall(body)
        sock.settimeout(2)
        rest = answer(sock)
    assert b"HTTP/1.1 201 Created" in rest and b'"id"' in rest


def test_pipelined_requests_are_answered_whole_and_in_order(server: Server) -> None:
    paths = ["/api/health", "/api/sessions?limit=1", "/api/health"]
    requests = b"".join(
        f"GET {p} HTTP/1.1\r\nhost: 127.0.0.1\r\nx-tachograph-key: {ADMIN_KEY}\r\n\r\n".encode()
        for p in paths
    )
    with connect(server) as sock:
        sock.sendall(requests + b"GET /api/health HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
        sock.settimeout(3)
        received = answer(sock)
    answers = _answers(received)
    statuses = [status for status, _ in answers]
    assert statuses == [b"HTTP/1.1 200 OK"] * 3 + [b"HTTP/1.1 401 Unauthorized"], received
    assert [b'"status"' in answers[0][1], answers[1][1].startswith(b'{"items":')] == [True, True]
