"""What a self-update attempt asks of the executor that claimed it: the one surface the
attempt drives (tokens, the agent's command and run, how its end is recorded), so the
attempt knows no executor internals and the two modules import in one direction only
(`TaskExecutor` implements this; scheduler/self_update_cycle.py uses it)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from domain.application import Tachograph
from domain.credentials import Binding
from domain.task_service import Claim, TaskService
from infra.executor import CommandSpec, RunResult
from infra.settings import Settings
from scheduler.transcript_writer import TranscriptWriter


class AttemptHost(Protocol):
    app: Tachograph
    settings: Settings
    service: TaskService
    worker: str
    shutting_down: threading.Event

    def issue_token(self, claim: Claim, binding: Binding | None = None) -> str | None: ...

    def revoke_token(self, claim: Claim) -> None: ...

    def command(
        self,
        claim: Claim,
        prompt: str,
        cwd: Path,
        env: dict[str, str],
        hook_settings: Path | None = None,
    ) -> CommandSpec: ...

    def run_agent(self, claim: Claim, writer: TranscriptWriter, spec: CommandSpec) -> RunResult: ...

    def finish(
        self,
        claim: Claim,
        writer: TranscriptWriter,
        result: RunResult,
        settle: Callable[[], str] | None = None,
    ) -> None: ...

    def conclude(self, claim: Claim, settle: Callable[[], str], how: str) -> None: ...

    def status_of(self, claim: Claim) -> str: ...

    def settle_retrying(self, record: Callable[[], Any]) -> Any: ...
