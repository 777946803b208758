"""Whether the agent's hook request is still there: a held call's caller may go away.

A runtime stops waiting for its hook at its own timeout (a command hook's client gives
up, an HTTP hook's connection closes). The request's ASGI `receive` says so: once the
body is read, the next message is `http.disconnect`, and it arrives only when the client
is gone (or the response is complete). The hook routes (api/hook_routes.py) put that
`receive` here for the request's task, and a held approval races it
(ingest/held_approvals.py), so a
request nobody waits for any more is abandoned at once instead of being decided later
for no one.
"""

from __future__ import annotations

from collections.abc import Coroutine
from contextvars import ContextVar
from typing import Any

from starlette.types import Receive

_RECEIVE: ContextVar[Receive | None] = ContextVar("hook_caller_receive", default=None)


def bind(receive: Receive) -> None:
    """The current hook request's `receive` (set before the route reads the body)."""
    _RECEIVE.set(receive)


async def _until_gone(receive: Receive) -> None:
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return


def caller_gone() -> Coroutine[Any, Any, None] | None:
    """An awaitable that completes when the caller disconnects; None outside a hook
    request (nothing can tell, so nothing is abandoned)."""
    receive = _RECEIVE.get()
    return None if receive is None else _until_gone(receive)
