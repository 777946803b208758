"""Outbound HTTP transport of the hook gateway (spec §6.1, §6.2) on a pooled httpx client."""

from __future__ import annotations

import hashlib
import hmac
import ssl
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from types import TracebackType
from typing import Any

import httpcore
import httpx

from domain.hook_config import HookHandler
from domain.hook_dispatch import (
    FAILURE_CONFIGURATION,
    FAILURE_MALFORMED,
    FAILURE_OVER_CAP,
    FAILURE_TIMEOUT,
    FAILURE_TRANSPORT,
    RESPONSE_BODY_CAP,
)
from infra.hook_wire import TransportReply

_TIMEOUT_ERRORS = (httpx.TimeoutException, httpcore.TimeoutException, TimeoutError)

# Deadline (time.monotonic) of the hook call running on this thread, if any. Sync httpx does
# every socket operation on the calling thread, so a thread-local reaches the network layer.
_deadline = threading.local()


def _clamp(timeout: float | None, error: type[Exception]) -> float | None:
    """The smaller of `timeout` and the time left before the deadline; `error` if none is left.

    Per-operation timeouts alone let a slow drip (one byte just inside each read timeout)
    run forever; clamping every socket operation bounds the whole call.
    """
    deadline: float | None = getattr(_deadline, "value", None)
    if deadline is None:
        return timeout
    left = deadline - time.monotonic()
    if left <= 0:
        raise error("hook deadline exceeded")
    return left if timeout is None else min(timeout, left)


class _DeadlineStream(httpcore.NetworkStream):
    """A network stream whose every operation respects the calling thread's deadline.

    Writes are held until the next read (or close) and sent as one: httpcore writes a
    request's head, body and end separately, three system calls where one does (each
    also hands the interpreter lock to another thread and waits to get it back). An
    HTTP/1.1 client sends its whole request before it reads, so nothing waits longer.
    """

    def __init__(self, inner: httpcore.NetworkStream) -> None:
        self._inner = inner
        self._unsent: list[bytes] = []
        self._write_timeout: float | None = None

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        """Send what is held, then read with the remaining time as the upper bound."""
        self._flush()
        return self._inner.read(max_bytes, _clamp(timeout, httpcore.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        """Hold `buffer` for the next read; the deadline still bounds the eventual send."""
        _clamp(timeout, httpcore.WriteTimeout)
        if buffer:
            self._unsent.append(buffer)
            self._write_timeout = timeout

    def _flush(self) -> None:
        if self._unsent:
            data = b"".join(self._unsent)
            self._unsent.clear()
            self._inner.write(data, _clamp(self._write_timeout, httpcore.WriteTimeout))

    def close(self) -> None:
        """Close the underlying stream (what is held was never going to be answered)."""
        self._unsent.clear()
        self._inner.close()

    def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore.NetworkStream:
        """TLS handshake within the remaining time."""
        clamped = _clamp(timeout, httpcore.ConnectTimeout)
        return _DeadlineStream(self._inner.start_tls(ssl_context, server_hostname, clamped))

    def get_extra_info(self, info: str) -> Any:
        """Delegate (the pool asks whether idle connections are still readable)."""
        return self._inner.get_extra_info(info)


class _DeadlineBackend(httpcore.NetworkBackend):
    """httpcore's sync backend with deadline-clamped streams."""

    def __init__(self) -> None:
        self._inner = httpcore.SyncBackend()

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.NetworkStream:
        """Connect within the remaining time."""
        clamped = _clamp(timeout, httpcore.ConnectTimeout)
        stream = self._inner.connect_tcp(host, port, clamped, local_address, socket_options)
        return _DeadlineStream(stream)

    def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.NetworkStream:
        """Hook URLs are always TCP."""
        raise httpcore.ConnectError("unix sockets are not used for hooks")

    def sleep(self, seconds: float) -> None:
        """Sleep (used by httpcore retries, which are disabled)."""
        self._inner.sleep(seconds)


class _ResponseStream(httpx.SyncByteStream):
    """Adapts an httpcore response stream to httpx."""

    def __init__(self, stream: Iterable[bytes]) -> None:
        self._stream = stream

    def __iter__(self) -> Iterator[bytes]:
        """Yield raw body chunks as they arrive."""
        yield from self._stream

    def close(self) -> None:
        """Release the connection (closing it when the body was not fully read)."""
        close = getattr(self._stream, "close", None)
        if close is not None:
            close()


class _DeadlineTransport(httpx.BaseTransport):
    """An httpx transport over an httpcore pool that uses the deadline backend.

    httpx.HTTPTransport cannot take a custom network backend, so this is its small core.
    httpcore exceptions pass through unmapped; HttpxHookTransport classifies them.
    """

    def __init__(self, limits: httpx.Limits, ssl_context: ssl.SSLContext) -> None:
        self._pool = httpcore.ConnectionPool(
            ssl_context=ssl_context,
            max_connections=limits.max_connections,
            max_keepalive_connections=limits.max_keepalive_connections,
            keepalive_expiry=limits.keepalive_expiry,
            network_backend=_DeadlineBackend(),
        )
        self._closed = False

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        """Send one request through the pool; refused once the transport is closed."""
        if self._closed:
            # httpcore's pool would quietly open new connections after close().
            raise httpcore.ConnectError("hook transport is closed")
        core_request = httpcore.Request(
            method=request.method,
            url=httpcore.URL(
                scheme=request.url.raw_scheme,
                host=request.url.raw_host,
                port=request.url.port,
                target=request.url.raw_path,
            ),
            headers=request.headers.raw,
            content=request.read(),
            extensions=request.extensions,
        )
        response = self._pool.handle_request(core_request)
        stream = response.stream
        if not isinstance(stream, Iterable):
            raise httpcore.ProtocolError("sync pool returned an async stream")
        return httpx.Response(
            status_code=response.status,
            headers=response.headers,
            stream=_ResponseStream(stream),
            extensions=response.extensions,
        )

    def close(self) -> None:
        """Close every pooled connection and refuse further requests."""
        self._closed = True
        self._pool.close()


def sign(secret: str, timestamp: str, body: bytes) -> str:
    """Value of x-tachograph-signature: HMAC-SHA256 over `timestamp + "." + body`."""
    message = timestamp.encode("ascii") + b"." + body
    digest = hmac.new(secret.encode("utf-8"), message, hashlib.sha256).hexdigest()
    return f"sha256={digest}"


class _MissingSecret(Exception):
    """The handler's secretEnv has no value."""


class _EarlyFailure(Exception):
    """Internal: ends a call early with a failure class."""

    def __init__(self, failure: str, status: int | None = None) -> None:
        super().__init__(failure)
        self.failure = failure
        self.status = status


class HttpxHookTransport:
    """HookTransport over one pooled httpx.Client; never raises from `call`."""

    def __init__(
        self,
        secrets: Mapping[str, str],
        *,
        limits: httpx.Limits | None = None,
        ssl_context: ssl.SSLContext | None = None,
        clock: Callable[[], float] = time.time,
        max_body_bytes: int = RESPONSE_BODY_CAP,
    ) -> None:
        self._secrets = dict(secrets)
        self._clock = clock
        self._max_body_bytes = max_body_bytes
        # Requests go straight to the transport, not through an httpx.Client: a hook
        # call wants none of a client's work (no redirects followed, no cookies kept or
        # sent, no proxy or netrc from the environment, no default headers), and that
        # work, cookie extraction above all, was a fifth of a hook call's CPU.
        self._transport = _DeadlineTransport(
            limits or httpx.Limits(max_connections=100, max_keepalive_connections=20),
            ssl_context or httpx.create_ssl_context(),
        )

    def close(self) -> None:
        """Close the pool."""
        self._transport.close()

    def __enter__(self) -> HttpxHookTransport:
        """Use as a context manager that closes the pool."""
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        """Close the pool."""
        self.close()

    def call(self, handler: HookHandler, body: bytes) -> TransportReply:
        """POST `body` to the handler; the whole call is bounded by handler.timeout_ms."""
        started = time.monotonic()
        status: int | None = None
        data: bytes | None = None
        failure: str | None = None
        try:
            headers = self._headers(handler, body)
            status, data = self._exchange(handler, headers, body, started)
        except _MissingSecret:
            failure = FAILURE_CONFIGURATION
        except _EarlyFailure as early:
            status, failure = early.status, early.failure
        except _TIMEOUT_ERRORS:
            failure = FAILURE_TIMEOUT
        except Exception:
            # Connection refused/reset, TLS, protocol errors, bad URLs: all "transport".
            failure = FAILURE_TRANSPORT
        return TransportReply(status, data, failure, (time.monotonic() - started) * 1000)

    def _headers(self, handler: HookHandler, body: bytes) -> list[tuple[str, str]]:
        """content-type, plus the signature headers when the handler has a secret."""
        headers = [("content-type", "application/json")]
        if handler.secret_env is None:
            return headers
        secret = self._secrets.get(handler.secret_env)
        if not secret:
            raise _MissingSecret(handler.secret_env)
        timestamp = str(int(self._clock()))
        headers.append(("x-tachograph-timestamp", timestamp))
        headers.append(("x-tachograph-signature", sign(secret, timestamp, body)))
        return headers

    def _exchange(
        self, handler: HookHandler, headers: list[tuple[str, str]], body: bytes, started: float
    ) -> tuple[int, bytes]:
        """Send the request and read a capped body before the deadline."""
        deadline = started + handler.timeout_ms / 1000
        seconds = handler.timeout_ms / 1000
        timeouts = {"connect": seconds, "read": seconds, "write": seconds, "pool": seconds}
        request = httpx.Request(
            "POST", handler.url, headers=headers, content=body, extensions={"timeout": timeouts}
        )
        previous = getattr(_deadline, "value", None)
        _deadline.value = deadline
        try:
            response = self._transport.handle_request(request)
            try:
                return response.status_code, self._read_capped(response)
            finally:
                response.close()
        finally:
            _deadline.value = previous

    def _read_capped(self, response: httpx.Response) -> bytes:
        """Read the raw body, stopping as soon as it exceeds the cap."""
        encoding = response.headers.get("content-encoding", "identity").strip().lower()
        if encoding != "identity":
            # We never ask for compression; decoding one would let a small body expand past
            # the cap after the check.
            raise _EarlyFailure(FAILURE_MALFORMED, response.status_code)
        declared = response.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > self._max_body_bytes:
            raise _EarlyFailure(FAILURE_OVER_CAP, response.status_code)
        chunks: list[bytes] = []
        size = 0
        for chunk in response.iter_raw():
            size += len(chunk)
            if size > self._max_body_bytes:
                raise _EarlyFailure(FAILURE_OVER_CAP, response.status_code)
            chunks.append(chunk)
        return b"".join(chunks)
