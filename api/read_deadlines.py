"""Deadlines for reading a request: its headers, then its body.

uvicorn closes a connection idle between requests (`timeout_keep_alive`), but once a
request's first byte arrived (or a connection was opened and nothing sent) it waits
without limit: a client sending a header line every few seconds, or its body a byte
at a time, holds its connection, and what was buffered of it, as long as it likes.
uvicorn and Starlette have no read timeout of their own, and an ASGI layer cannot see
a request before its headers are complete, so this is uvicorn's httptools protocol
(what `serve` ran before) with two deadlines: the headers within
TACHOGRAPH_HTTP_HEADER_TIMEOUT_S of the request's first byte (of the connection, for
its first request), and the whole body within TACHOGRAPH_HTTP_BODY_TIMEOUT_S of the
headers. A client too slow gets 408 when no answer has started, and the connection is
closed either way.

A request that arrives in one read (every hook call) arms no timer: a deadline is set
only when a read ends in the middle of a request's headers or body.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any, ClassVar

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from api.one_send import OneSend

log = logging.getLogger(__name__)

# A request line and headers longer than this are refused 431: httptools buffers a
# header without a limit of its own, so a client could otherwise fill memory within the
# header deadline (h11, uvicorn's other parser, stops at 16 KiB).
MAX_HEAD_BYTES = 64 * 1024

_IDLE, _HEADERS, _BODY = 0, 1, 2
_PHASE = {_HEADERS: "headers", _BODY: "body"}


class DeadlineProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol, with deadlines for a request's headers and body."""

    header_timeout_s: ClassVar[float] = 10.0
    body_timeout_s: ClassVar[float] = 30.0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._reading = _IDLE
        # Loop time the phase being read began; None: during the read being handled (the
        # clock is read only if that read ends mid-request).
        self._since: float | None = None
        self._deadline: asyncio.TimerHandle | None = None
        self._deadline_at = 0.0
        self._head_bytes = 0  # read since the request's first byte, while in its headers

    # Where the request being read is, from the parser's callbacks.

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._reading, self._since = _HEADERS, self.loop.time()  # silence counts too
        self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self._reading == _IDLE and self._deadline is None:
            return  # the request arrived whole (the usual case): no timer to touch
        if self.transport.is_closing() or self.transport.get_protocol() is not self:
            self._disarm()  # refused as malformed, or handed to a WebSocket protocol
            return
        if self._reading == _HEADERS:
            # Every byte of this read counts (it may also end the request before): an
            # overestimate by at most one read, never an underestimate.
            self._head_bytes += len(data)
            if self._head_bytes > MAX_HEAD_BYTES:
                log.warning("request headers over %d bytes; connection closed", MAX_HEAD_BYTES)
                self._refuse(
                    b"431 Request Header Fields Too Large" if self._between_answers() else None,
                    "request_header_fields_too_large",
                    f"The request line and headers exceed {MAX_HEAD_BYTES // 1024} KiB.",
                )
                return
        self._arm()

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._reading, self._since, self._head_bytes = _HEADERS, None, 0

    def on_headers_complete(self) -> None:
        before = self.cycle
        super().on_headers_complete()
        self._reading, self._since = _BODY, None
        if self.cycle is not before:  # not an upgrade: a cycle whose task has not run yet
            self.cycle.transport = OneSend(self.transport, self.loop)  # type: ignore[assignment]

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._reading = _IDLE
        cycle = self.cycle
        if cycle.response_complete and not self.pipeline and self.timeout_keep_alive_task is None:
            # The body ended after its answer (a refusal that never read it): uvicorn
            # armed its keep-alive timeout when the answer went out and every later
            # read of the body disarmed it. The connection is idle now: arm it again.
            self.timeout_keep_alive_task = self.loop.call_later(
                self.timeout_keep_alive, self.timeout_keep_alive_handler
            )

    # The one timer of the connection, for the phase being read.

    def _arm(self) -> None:
        if self._reading == _IDLE:
            self._disarm()
            return
        if self._since is None:
            self._since = self.loop.time()
        limit = self.header_timeout_s if self._reading == _HEADERS else self.body_timeout_s
        at = self._since + limit
        if self._deadline is not None:
            if self._deadline_at == at:
                return
            self._deadline.cancel()
        self._deadline_at = at
        self._deadline = self.loop.call_at(at, self._expired)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _expired(self) -> None:
        self._deadline = None
        if self.transport.is_closing():
            return
        phase = _PHASE[self._reading]
        limit = self.header_timeout_s if self._reading == _HEADERS else self.body_timeout_s
        cycle = self.cycle
        if self._reading == _HEADERS:
            may_answer = self._between_answers()
        else:
            may_answer = not cycle.response_started
        log.warning("request %s not received within %g s; connection closed", phase, limit)
        if self._reading == _BODY and not cycle.response_complete:
            # The app waiting for the body is told the client is gone, and whatever it
            # sends is dropped: the 408 was the answer.
            cycle.disconnected = True
            cycle.message_event.set()
        self._refuse(
            b"408 Request Timeout" if may_answer else None,
            "request_timeout",
            f"The request's {phase} did not arrive within {limit:g} s.",
        )

    def _between_answers(self) -> bool:
        """Whether no answer of this connection is under way: a pipelined request's
        headers may arrive while the one before is answered, and no refusal may cut
        into that answer."""
        return self.cycle is None or self.cycle.response_complete

    def _refuse(self, status: bytes | None, code: str, message: str) -> None:
        """Answer `status` (None: no answer, one was under way) and close the connection."""
        self._disarm()
        if status is not None:
            self.transport.write(self._answer(status, code, message))
        self.transport.close()

    def _answer(self, status: bytes, code: str, message: str) -> bytes:
        body = json.dumps({"error": code, "message": message}).encode()
        head = [b"HTTP/1.1 " + status + b"\r\n"]
        defaults = self.server_state.default_headers  # server and date, as uvicorn sends
        head += [name + b": " + value + b"\r\n" for name, value in defaults]
        head += [
            b"content-type: application/json\r\n",
            b"content-length: %d\r\n" % len(body),
            b"connection: close\r\n\r\n",
        ]
        return b"".join(head) + body


def with_deadlines(header_timeout_s: float, body_timeout_s: float) -> type[DeadlineProtocol]:
    """The protocol class uvicorn is given (`http=`), with these deadlines."""
    return type(
        "DeadlineProtocol",
        (DeadlineProtocol,),
        {"header_timeout_s": header_timeout_s, "body_timeout_s": body_timeout_s},
    )
