"""The composition root: builds every adapter and service from one Settings object."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from uuid import UUID

from domain.application import Tachograph
from infra.event_store import open_application, schema_lock
from infra.settings import Settings
from projections.base import Projection
from projections.registry import all_projections
from projections.runner import ProjectionRunner, ensure_schema
from projections.store import PostgresReadStore, ReadStore, SQLiteReadStore
from scheduler.runtime import Job, SchedulerRuntime

log = logging.getLogger(__name__)


@dataclass
class Services:
    """Everything a process runs; the API, the worker and the CLI share it."""

    settings: Settings
    app: Tachograph
    store: ReadStore
    projections: list[Projection]
    runner: ProjectionRunner
    scheduler: SchedulerRuntime
    started: bool = field(default=False)

    def start(self) -> None:
        """Catch the read models up, then follow the log and run scheduled jobs."""
        if self.started:
            return
        self.started = True
        self.runner.catch_up()
        self.runner.start()
        self.scheduler.start()

    def stop(self) -> None:
        """Stop jobs, then projections, then close connections (idempotent)."""
        if not self.started:
            self.close()
            return
        self.started = False
        self.scheduler.stop()
        self.runner.stop()
        self.close()

    def close(self) -> None:
        self.store.close()
        self.app.close()

    def delete_session(self, session_id: UUID, actor: str) -> int | None:
        """Delete one session; the single path every deletion takes."""
        return self.app.delete_session(session_id, actor).position


def open_read_store(settings: Settings) -> ReadStore:
    """Read-model store beside the configured event store."""
    if settings.database_url is None:
        settings.data_dir.mkdir(parents=True, exist_ok=True)
        return SQLiteReadStore(settings.readmodel_sqlite_path)
    return PostgresReadStore(settings.database_url.conninfo(), settings.database_schema)


def build_services(settings: Settings) -> Services:
    """Open stores (creating schemas idempotently, safe across concurrent starts) and wire."""
    settings.workspace_root.mkdir(parents=True, exist_ok=True)
    projections = all_projections()
    with schema_lock(settings):
        app = open_application(settings)
        store = open_read_store(settings)
        ensure_schema(store, projections)
    runner = ProjectionRunner(app, store, projections)
    app.on_commit = runner.wake
    app.ensure_default_workspace(".")
    jobs: list[Job] = []
    scheduler = SchedulerRuntime(jobs, timezone=settings.timezone)
    return Services(settings, app, store, projections, runner, scheduler)

