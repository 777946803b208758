"""Recording reported model requests through the hooks' group commit.

A request is its own aggregate with an id derived from the report (domain/model_usage.py):
an exporter's retry of the same batch hits the log's version check and is taken as
already recorded, never counted twice. Each request is its own append in the shared
commit, so one duplicate does not fail the others of its batch.

Exports are not hooks: nobody waits on their answer but a batch exporter that sends
every few seconds. So their appends are held for a short window (`HOLD_S`) and handed
to the group commit together: at a thousand exports a second they make about a hundred
transactions instead of a thousand, and a hook's commit rarely queues behind one (the
hook gateway's figures beside the receiver, docs/performance.md). They are still
answered only once durable; the window only delays that answer.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass
from typing import Final
from uuid import UUID

from eventsourcing.domain import DomainEventProtocol
from eventsourcing.persistence import IntegrityError

from domain.model_usage import ReportedRequest, record_request
from ingest.group_commit import GroupCommitter
from ingest.loop import running_loop
from ingest.ports import Deliver, Done

# How long an export's appends wait for others to commit with. An exporter's own
# timeout is seconds (OTLP's default is 10 s); a hook's figures are milliseconds.
HOLD_S: Final = 0.01

_Held = tuple[UUID, list[DomainEventProtocol[UUID]], Done, Deliver]


@dataclass(frozen=True, slots=True)
class Placed:
    """A reported request and where it is recorded."""

    reported: ReportedRequest
    session_id: UUID
    workspace: str


@dataclass(frozen=True, slots=True)
class UsageRecorded:
    recorded: int  # appended now
    repeated: int  # already in the log (a retried export)
    position: int | None  # the last log position appended, None when nothing was


class UsageRecorder:
    """Appends reported requests; answers once they are durable."""

    def __init__(self, committer: GroupCommitter) -> None:
        self.committer = committer
        # Appends waiting for their window, per event loop (the flush runs on the loop
        # whose requests wait for it, so it cannot be lost with another loop).
        self._held: dict[asyncio.AbstractEventLoop, list[_Held]] = {}

    def submit(self, placed: Sequence[Placed], actor: str) -> Awaitable[UsageRecorded]:
        """Queue the appends now; what is returned waits until they are durable."""
        loop = running_loop()
        if loop is None:
            raise RuntimeError("UsageRecorder.submit runs on an event loop")
        waits: list[asyncio.Future[int]] = []
        for item in placed:
            aggregate = record_request(item.reported, item.session_id, item.workspace, actor)
            appended: asyncio.Future[int] = loop.create_future()
            self._hold(
                loop,
                (
                    aggregate.id,
                    list(aggregate.collect_events()),
                    _settle(appended),
                    loop.call_soon_threadsafe,
                ),
            )
            waits.append(appended)
        return _recorded(waits)

    def _hold(self, loop: asyncio.AbstractEventLoop, item: _Held) -> None:
        held = self._held.get(loop)
        if held is None:
            held = self._held[loop] = []
            loop.call_later(HOLD_S, self._flush, loop)
        held.append(item)

    def _flush(self, loop: asyncio.AbstractEventLoop) -> None:
        for item in self._held.pop(loop, []):
            self.committer.enqueue(*item)


async def _recorded(waits: list[asyncio.Future[int]]) -> UsageRecorded:
    outcomes = await asyncio.gather(*waits, return_exceptions=True)
    repeated = 0
    position: int | None = None
    for outcome in outcomes:
        if isinstance(outcome, IntegrityError):
            repeated += 1  # already in the log: a retried export
        elif isinstance(outcome, BaseException):
            raise outcome
        else:
            position = max(position or 0, outcome)
    return UsageRecorded(len(outcomes) - repeated, repeated, position)


def _settle(future: asyncio.Future[int]) -> Done:
    def done(outcome: int | BaseException) -> None:
        if future.done():
            return  # the request went away
        if isinstance(outcome, BaseException):
            future.set_exception(outcome)
        else:
            future.set_result(outcome)

    return done
