"""ASGI middleware: the request body size cap (authentication is api/auth.py)."""

from __future__ import annotations

import json

from starlette.types import ASGIApp, Message, Receive, Scope, Send

MAX_BODY_BYTES = 1024 * 1024


async def send_error(send: Send, status: int, code: str, message: str, **extra: object) -> None:
    """An error answer straight from middleware, in the API's {error, message} shape."""
    body = json.dumps({"error": code, "message": message, **extra}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", b"%d" % len(body)),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


class BodyLimitMiddleware:
    """Reject bodies over 1 MiB with 413, by header or while streaming."""

    def __init__(self, app: ASGIApp, max_bytes: int = MAX_BODY_BYTES) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope["headers"])
        length = headers.get(b"content-length")
        if length is not None and length.isdigit() and int(length) > self.max_bytes:
            await send_error(send, 413, "payload_too_large", self._message())
            return
        # Read the body up front (at most the cap plus one chunk) so an oversized
        # chunked upload is refused before any route sees a byte of it.
        chunks: list[bytes] = []
        received = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                await self.app(scope, receive, send)  # disconnect: let the app see it
                return
            chunk = message.get("body", b"")
            received += len(chunk)
            if received > self.max_bytes:
                await send_error(send, 413, "payload_too_large", self._message())
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        whole: Message = {"type": "http.request", "body": b"".join(chunks), "more_body": False}
        await self.app(scope, replaying(whole, receive), send)

    def _message(self) -> str:
        return f"The request body exceeds {self.max_bytes // 1024} KiB; send less."


def replaying(first: Message, receive: Receive) -> Receive:
    """A receive that hands the app a message already read, then whatever follows."""
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return first
        return await receive()

    return replay
