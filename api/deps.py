"""Dependencies as Annotated aliases: each collaborator a route uses, the actor,
read-your-writes.

A route names only the collaborators it uses, so its signature says what it depends
on; api/app.py (the one module that sees the composition root) puts them on app.state.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, TypeVar

from fastapi import Depends, Header, Query, Request, Response

from api.auth import SessionTargets, request_principal
from api.errors import ApiError
from api.input_limits import MAX_POSITION
from domain.application import Tachograph
from domain.key_service import KeyService
from infra.note_key import NoteKey
from infra.settings import Settings
from ingest.service import HookIngest
from ingest.usage import UsageRecorder
from projections.runner import ProjectionRunner
from projections.store import ReadStore
from scheduler.autonomy import AutonomyRuntime
from scheduler.runtime import SchedulerRuntime
from scheduler.task_runtime import TaskRuntime
from services.credentials import CredentialCache, Principal
from services.learned_context import LearnedContext
from services.policies import Policies
from services.usage_figures import UsageFigures


@dataclass(frozen=True, slots=True)
class Collaborators:
    """What the routes use, each handed out on its own by a dependency below."""

    settings: Settings
    app: Tachograph
    store: ReadStore
    runner: ProjectionRunner
    ingest: HookIngest
    scheduler: SchedulerRuntime
    credentials: CredentialCache
    keys: KeyService
    tasks: TaskRuntime
    autonomy: AutonomyRuntime
    learned: LearnedContext
    sessions: SessionTargets
    # The log's note key; None only where no key file exists (a reading command).
    note_key: NoteKey | None
    # The operator's policy documents: record, activate, roll back, remove.
    policies: Policies
    usage: UsageRecorder
    usage_figures: UsageFigures


T = TypeVar("T")


def _collaborator(pick: Callable[[Collaborators], T]) -> Any:
    """A dependency answering one collaborator of those api/app.py put on app.state."""

    # Dependencies that never block are async: FastAPI runs sync ones in the thread
    # pool, a measurable cost per request.
    async def collaborator(request: Request) -> Any:
        return pick(request.app.state.collaborators)

    return Depends(collaborator)


SettingsDep = Annotated[Settings, _collaborator(lambda c: c.settings)]
# The event-sourced application: commands, and the log they append to.
AppDep = Annotated[Tachograph, _collaborator(lambda c: c.app)]
StoreDep = Annotated[ReadStore, _collaborator(lambda c: c.store)]
RunnerDep = Annotated[ProjectionRunner, _collaborator(lambda c: c.runner)]
IngestDep = Annotated[HookIngest, _collaborator(lambda c: c.ingest)]
SchedulerDep = Annotated[SchedulerRuntime, _collaborator(lambda c: c.scheduler)]
CredentialsDep = Annotated[CredentialCache, _collaborator(lambda c: c.credentials)]
KeysDep = Annotated[KeyService, _collaborator(lambda c: c.keys)]
TasksDep = Annotated[TaskRuntime, _collaborator(lambda c: c.tasks)]
AutonomyDep = Annotated[AutonomyRuntime, _collaborator(lambda c: c.autonomy)]
LearnedDep = Annotated[LearnedContext, _collaborator(lambda c: c.learned)]
NoteKeyDep = Annotated[NoteKey | None, _collaborator(lambda c: c.note_key)]
PoliciesDep = Annotated[Policies, _collaborator(lambda c: c.policies)]
SessionTargetsDep = Annotated[SessionTargets, _collaborator(lambda c: c.sessions)]


async def get_principal(request: Request) -> Principal:
    """The caller, as api/auth.py authenticated it."""
    return request_principal(request)


PrincipalDep = Annotated[Principal, Depends(get_principal)]


async def get_actor(request: Request) -> str:
    """Who causes the command's events: `key:<label>`, `agent:...`, `task:...`, `anonymous`."""
    return request_principal(request).actor


ActorDep = Annotated[str, Depends(get_actor)]


def wait_min_position(
    app: AppDep,
    runner: RunnerDep,
    settings: SettingsDep,
    min_position: Annotated[int | None, Query(alias="minPosition", ge=0, le=MAX_POSITION)] = None,
    header_position: Annotated[
        int | None, Header(alias="x-tachograph-min-position", ge=0, le=MAX_POSITION)
    ] = None,
) -> None:
    """Hold a read until the projections have processed the requested position (≤ 5 s)."""
    wanted = max(min_position or 0, header_position or 0)
    limit = settings.read_wait_s
    if wanted > runner.position:
        head = app.recorder.max_notification_id() or 0
        if wanted > head:
            # No wait can help: commands only ever hand out positions already in the log.
            raise ApiError(
                422,
                "position_not_in_log",
                f"Position {wanted} is beyond the end of the log ({head}); "
                "send a position a command returned.",
                position=head,
            )
    if wanted and not runner.wait_for(wanted, limit):
        raise ApiError(
            503,
            "projection_lagging",
            f"Read models have not reached position {wanted} within {limit:g} s; retry.",
            position=runner.position,
        )


Consistent = Annotated[None, Depends(wait_min_position)]


class Commit:
    """Waits for a command's own position in the read models and puts it in the header."""

    __slots__ = ("_response", "_runner", "_wait_s")

    def __init__(self, runner: ProjectionRunner, wait_s: float, response: Response) -> None:
        self._runner = runner
        self._wait_s = wait_s
        self._response = response

    def __call__(self, position: int | None) -> int:
        if position is None:
            # A no-op command appended nothing; report the log position it observed.
            position = self._runner.position
        elif not self._runner.wait_for(position, self._wait_s):
            raise ApiError(
                503,
                "projection_lagging",
                f"The command was recorded at position {position}, but read models lag; "
                "read again with minPosition.",
                position=position,
            )
        self._response.headers["x-tachograph-position"] = str(position)
        return position


async def get_commit(runner: RunnerDep, settings: SettingsDep, response: Response) -> Commit:
    """The route's Commit, writing to the same response the route answers with."""
    return Commit(runner, settings.read_wait_s, response)


CommitDep = Annotated[Commit, Depends(get_commit)]
