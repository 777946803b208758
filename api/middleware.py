"""ASGI middleware: the request body size cap (authentication is api/auth.py).

The cap runs after authentication: a request whose credential is refused is answered
from its headers, and nothing of its body is read beyond what uvicorn buffers before
it pauses reading (64 KiB and one socket read); api/read_deadlines.py bounds how long
the rest may take to arrive.
"""

from __future__ import annotations

import json
import re

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api.errors import ApiError

# Where AuthMiddleware puts the caller it established (api/auth.py).
PRINCIPAL = "tachograph.principal"
# Where this middleware leaves an authenticated request's whole body, read once: a hook
# route takes it from here instead of reading it again through Starlette's Request.
BODY = "tachograph.body"
MAX_BODY_BYTES = 1024 * 1024
# A hook must not fail because a tool read a big file: the routes that take hooks accept
# up to 16 MiB, and what is recorded of the call stays bounded (domain/dispatch_facts.py).
HOOK_BODY_MAX_BYTES = 16 * 1024 * 1024
# The agent runtimes' hook routes (api/hook_routes.py): `/hooks/<runtime>`, and for
# the runtimes whose payload may not name its event, `/hooks/<runtime>/<Event>`; also
# their templates, from which the OpenAPI document states each route's role.
RUNTIME_HOOK_PATH = re.compile(
    r"^/hooks/(?:claude|(?:codex|gemini|copilot|qwen|droid|cline|opencode|kilo|\{runtime\})"
    r"(?:/(?:[A-Za-z][A-Za-z0-9_]{0,63}|\{event\}))?)$"
)
# The OTLP/HTTP receiver (api/otlp_routes.py): agents write there with their hook token.
OTLP_PATH = re.compile(r"^/v1/(?:logs|metrics|traces)$")
HOOK_PATHS = re.compile(
    RUNTIME_HOOK_PATH.pattern + r"|^/hooks/coder$|^/api/sessions/[^/]+/events$|" + OTLP_PATH.pattern
)


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
    """Reject bodies over 1 MiB (16 MiB on hook routes) with 413, by header or while
    streaming.

    An authenticated request's body is read up front; a public route's (the page,
    /metrics, Coder's webhook, which verifies its token first) only if the route reads
    it, and 413 once it passes the cap.
    """

    def __init__(
        self,
        app: ASGIApp,
        max_bytes: int = MAX_BODY_BYTES,
        hook_max_bytes: int = HOOK_BODY_MAX_BYTES,
    ) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.hook_max_bytes = hook_max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        cap = self.hook_max_bytes if HOOK_PATHS.match(scope["path"]) else self.max_bytes
        headers = dict(scope["headers"])
        length = headers.get(b"content-length")
        if length is not None and length.isdigit() and int(length) > cap:
            await send_error(send, 413, "payload_too_large", _message(cap))
            return
        if PRINCIPAL not in scope:
            await self.app(scope, capped(receive, cap), send)
            return
        # Read the body up front (at most the cap plus one chunk) so an oversized
        # chunked upload is refused before any route sees a byte of it.
        chunks: list[bytes] = []
        received = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return  # the client left (or was cut at its body deadline): nobody to answer
            chunk = message.get("body", b"")
            received += len(chunk)
            if received > cap:
                await send_error(send, 413, "payload_too_large", _message(cap))
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        scope[BODY] = body
        whole: Message = {"type": "http.request", "body": body, "more_body": False}
        await self.app(scope, replaying(whole, receive), send)


def _message(cap: int) -> str:
    return f"The request body exceeds {cap // 1024} KiB; send less."


def capped(receive: Receive, cap: int) -> Receive:
    """A receive that raises 413 (rendered by the route's error handler) past `cap`."""
    received = 0

    async def receive_capped() -> Message:
        nonlocal received
        message = await receive()
        received += len(message.get("body", b""))
        if received > cap:
            raise ApiError(413, "payload_too_large", _message(cap))
        return message

    return receive_capped


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
