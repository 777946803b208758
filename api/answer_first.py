"""Tells the projection runner each time an answer has gone out (see ProjectionRunner.answered)."""

from __future__ import annotations

from collections.abc import Callable

from starlette.types import ASGIApp, Receive, Scope, Send


class AnswerFirstMiddleware:
    """Outermost: runs `on_answered` once a request's response has been sent (or failed)."""

    def __init__(self, app: ASGIApp, on_answered: Callable[[], None]) -> None:
        self.app = app
        self.on_answered = on_answered

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        try:
            await self.app(scope, receive, send)
        finally:
            self.on_answered()
