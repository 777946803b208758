"""An answer's status line and headers go out in the same send as its body.

uvicorn writes a response's head when the app starts it and its body when the app
sends it, and uvloop sends each write at once: two segments on the wire, two system
calls, each of which (on loopback) also runs the receiving side in the kernel while
the interpreter lock is held. Every hook answer is one head and one small body sent
in the same step of its task, so the head is held until the body arrives and the two
leave as one write: one segment, one system call. Measured with `tachograph bench`
(docs/performance.md, "One send per answer").

Only a cycle's first write is held, and never past the end of the loop step that
wrote it (`call_soon`, which runs before the loop next reads a socket): a streamed
answer's head reaches its client as soon as it would have, its chunks are not held,
and nothing written later can overtake it.
"""

from __future__ import annotations

import asyncio
from typing import Any


class OneSend:
    """A request cycle's transport: its first write waits for the second, within one step."""

    __slots__ = ("_transport", "_loop", "_fresh", "_held")

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._fresh = True
        self._held: bytes | None = None

    def write(self, data: bytes) -> None:
        held = self._held
        if held is not None:
            self._held = None
            self._transport.write(held + data)
        elif self._fresh:
            self._fresh = False
            self._held = bytes(data)
            self._loop.call_soon(self.flush)
        else:
            self._transport.write(data)

    def flush(self) -> None:
        """Send what is held (a head whose body did not follow in the same step)."""
        held = self._held
        if held is not None:
            self._held = None
            self._transport.write(held)

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def __getattr__(self, name: str) -> Any:
        # is_closing, get_extra_info and the rest: the connection's own transport.
        return getattr(self._transport, name)
