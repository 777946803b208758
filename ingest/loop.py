"""Where a step of the ingest service runs: on an event loop, or in a plain thread.

`HookIngest.ingest` is one coroutine for every caller. The hook routes await it on the
server's event loop; the task executor and the synchronous routes drive it from their
own threads with `run_sync`. What differs is decided here, by whether the calling
thread runs an event loop, never by a second copy of the service's rules:

- `offload` runs a blocking step (a log read, a handler's HTTP call) in a worker thread
  when the caller is a loop, so the loop keeps serving other requests; inline otherwise.
- the dispatch log's `append` (ingest/app_ports.py) joins the group commit and wakes
  the loop once per committed batch on a loop; elsewhere the caller commits.

On a thread with no loop nothing the coroutine awaits ever suspends, so `run_sync`
finishes it in one step, with no loop to create or tear down.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine, Generator
from typing import Any, TypeVar

from anyio import to_thread

T = TypeVar("T")


def running_loop() -> asyncio.AbstractEventLoop | None:
    """The event loop running in this thread, None in a plain thread."""
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


async def offload(step: Callable[[], T]) -> T:
    """Run a blocking step: in a worker thread on an event loop, inline in a plain thread."""
    if running_loop() is None:
        return step()
    return await to_thread.run_sync(step)


class Ready(Awaitable[T]):
    """A value already known, awaitable without suspending (a plain thread's commit)."""

    __slots__ = ("value",)

    def __init__(self, value: T) -> None:
        self.value = value

    def __await__(self) -> Generator[Any, None, T]:
        return self.value
        yield  # pragma: no cover - makes this a generator that never suspends


def run_sync(coroutine: Coroutine[Any, Any, T]) -> T:
    """Finish a coroutine of the ingest service in a thread that runs no event loop."""
    try:
        coroutine.send(None)
    except StopIteration as finished:
        return finished.value  # type: ignore[no-any-return]
    coroutine.close()
    raise RuntimeError("an ingest step suspended outside an event loop")
