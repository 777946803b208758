"""The composition root: builds every adapter and service from one Settings object."""

from __future__ import annotations

import gc
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from uuid import UUID

from apscheduler.triggers.interval import IntervalTrigger
from eventsourcing.application import AggregateNotFoundError
from eventsourcing.persistence import Recording

from domain.application import Tachograph
from domain.dispatch_facts import RECORD_FULL
from domain.ids import forget_buffered_ids
from domain.key_service import KeyService
from domain.lifecycle import LifecycleEvent
from domain.session import Session, SessionTarget
from infra.approval_notify import ApprovalNotifier, notify_handler
from infra.approval_wakeups import PgApprovalWakeups
from infra.decision_export import DecisionExport, otlp_sender
from infra.event_store import open_application, schema_lock
from infra.hook_transport import HttpxHookTransport
from infra.hook_wire import ask
from infra.metrics import instrument_jobs, observe_batch, observe_dispatch, observe_recorded
from infra.note_key import NoteKey, load_note_key
from infra.pool_check import ping_when_stale
from infra.pool_reconnect import steady_reconnects
from infra.settings import Settings
from ingest.app_ports import AppSessions
from ingest.approval_gate import REUSE_WITHIN_S, ApprovalGate
from ingest.group_commit import CommittedDispatches, GroupCommitter
from ingest.held_approvals import HeldApprovals
from ingest.loop import run_sync
from ingest.service import HookIngest, Ingested, Ports, Rules
from ingest.usage import UsageRecorder
from projections.base import Projection
from projections.learned import LearnedProjection
from projections.log_checkpoints import attach_signing_key, checkpoint_at_shutdown, links_at
from projections.log_tree import attach_note_signer, sign_log_head
from projections.policies import PoliciesProjection
from projections.registry import all_projections
from projections.runner import ProjectionRunner, ensure_schema
from projections.sessions import session_exists
from projections.store import PostgresReadStore, ReadStore, SQLiteReadStore
from scheduler.attempt_tokens import AttemptTokens
from scheduler.autonomy import AutonomyRuntime
from scheduler.maintenance import expire_orphaned_approvals_job, prune_hook_audit_job
from scheduler.runtime import Job, SchedulerRuntime
from scheduler.task_runtime import TaskRuntime, build_task_runtime
from services.active_policies import ActivePolicies
from services.approval_log import AppApprovals
from services.credentials import CredentialCache
from services.learned_context import LearnedContext
from services.policies import Policies
from services.usage_figures import UsageFigures
from services.witness_submit import submit_to_witnesses

log = logging.getLogger(__name__)
_SESSION_WORKSPACES_KEPT = 10_000
COMMIT_LINGER_S = 0.002


@dataclass
class Services:
    """Everything a process runs; the API, the worker and the CLI share it."""

    settings: Settings
    app: Tachograph
    store: ReadStore
    projections: list[Projection]
    runner: ProjectionRunner
    scheduler: SchedulerRuntime
    ingest: HookIngest
    transport: HttpxHookTransport
    credentials: CredentialCache
    keys: KeyService
    started: bool = field(default=False)
    tasks: TaskRuntime | None = None
    committer: GroupCommitter | None = None
    autonomy: AutonomyRuntime | None = None
    # Hook requests waiting for an operator's decision (asyncio, no thread each).
    held: HeldApprovals | None = None
    _session_workspaces: dict[UUID, str] = field(default_factory=dict, repr=False)
    # Every agent's learned content, in memory, for deliveries (hooks, task prompts).
    learned: LearnedContext | None = None
    # The Ed25519 key of the log's signed checkpoints; None only for a reading command
    # run where no key file exists.
    note_key: NoteKey | None = None
    # The operator's policy rules: compiled active revisions (the hook path reads them)
    # and the commands that change them.
    active_policies: ActivePolicies | None = None
    policies: Policies | None = None
    # Hook decisions out as OpenTelemetry spans, when an OTLP endpoint is configured.
    decision_export: DecisionExport | None = None
    # Reported model requests in (OTLP), and their figures in memory for budgets.
    usage: UsageRecorder | None = None
    usage_figures: UsageFigures | None = None

    def start(self) -> None:
        """Catch the read models up, then follow the log and run scheduled jobs."""
        if self.started:
            return
        self.started = True
        self.runner.catch_up()
        self.credentials.refresh()
        self.credentials.start()
        if self.learned is not None:
            self.learned.refresh()
            self.learned.start()
        if self.active_policies is not None:
            self.active_policies.refresh()
            self.active_policies.start()
        self.runner.start()
        self.scheduler.start()
        if self.decision_export is not None:
            self.decision_export.start()
        if self.usage_figures is not None:
            self.usage_figures.refresh()
            self.usage_figures.start()

    def start_receiving(self) -> None:
        """What the OTLP receiver's own process runs (api/app.py:create_receiver_app):
        credentials kept current; the read models are the main process's to build."""
        self.credentials.refresh()
        self.credentials.start()

    def stop_receiving(self) -> None:
        """Answer what is queued, then close (the receiver's process is ending)."""
        self.credentials.stop()
        self.close()

    def stop(self) -> None:
        """Stop jobs, then projections, then close connections (idempotent)."""
        if not self.started:
            self.close()
            return
        self.started = False
        self.scheduler.stop()
        if self.usage_figures is not None:
            self.usage_figures.stop()
        if self.tasks is not None:
            self.tasks.shutdown()  # reap running attempts and record them before closing
        if self.committer is not None:
            self.committer.close()  # drain queued appends so the checkpoint covers them
        self.runner.stop()
        self.credentials.stop()
        if self.learned is not None:
            self.learned.stop()
        if self.active_policies is not None:
            self.active_policies.stop()
        if self.held is not None:
            self.held.close()
        checkpoint_at_shutdown(self.runner)
        sign_log_head(self.projections, self.store)
        self.close()

    def close(self) -> None:
        if self.committer is not None:
            self.committer.close()  # drain queued appends before the store closes
        if self.decision_export is not None:
            self.decision_export.close()  # the last decisions, with the links read so far
        self.transport.close()
        self.store.close()
        self.app.close()

    def session_target(self, session_id: UUID) -> SessionTarget:
        """What `session_id` names: a Session's workspace, another aggregate, or nothing."""
        return session_target(self.app, self._session_workspaces, session_id)

    def known_session_target(self, session_id: UUID) -> SessionTarget | None:
        """The same from memory alone (a session looked up before); None: ask the log."""
        workspace = self._session_workspaces.get(session_id)
        return SessionTarget(workspace) if workspace is not None else None


def open_read_store(settings: Settings, breaker: object = None) -> ReadStore:
    """Read-model store beside the configured event store."""
    if settings.database_url is None:
        settings.data_dir.mkdir(parents=True, exist_ok=True)
        return SQLiteReadStore(settings.readmodel_sqlite_path)
    store = PostgresReadStore(
        settings.database_url.conninfo(),
        settings.database_schema,
        max_size=2 * settings.database_pool_size,
        breaker=breaker,
        check=ping_when_stale,
    )
    steady_reconnects(store.pool)
    return store


_FORK_HOOKS: list[Callable[[], None]] = []


def install_process_hooks() -> None:
    """What every forked child must do before it runs any of this process's code; once
    per process (os.register_at_fork cannot unregister)."""
    if not _FORK_HOOKS:
        _FORK_HOOKS.append(forget_buffered_ids)
        os.register_at_fork(after_in_child=forget_buffered_ids)


def _log_and_read_models(
    settings: Settings, *, reading: bool = False
) -> tuple[Tachograph, ReadStore, list[Projection], NoteKey | None]:
    """The log, the read models' store (schemas created) and the projections, with the
    keys they sign the log's checkpoints and notes with (the note key returned)."""
    projections = all_projections()
    attach_signing_key(projections, settings.log_signing_key)
    note_key = load_note_key(settings.note_key_path, create=not reading)
    attach_note_signer(
        projections,
        note_key.sign_checkpoint if note_key else None,
        settings.log_note_every_events,
        settings.log_note_every_s,
    )
    with schema_lock(settings):
        app = open_application(settings)
        store = open_read_store(settings, getattr(app.recorder, "breaker", None))
        ensure_schema(store, projections)
    return app, store, projections, note_key


def build_runner(settings: Settings) -> ProjectionRunner:
    """The projections alone, for the process that applies the log for `serve`
    (cli/projections_process.py); its commits there compete with no request."""
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    app, store, projections, _ = _log_and_read_models(settings)
    return ProjectionRunner(app, store, projections, commit_linger=COMMIT_LINGER_S)


def build_services(settings: Settings, *, reading: bool = False) -> Services:
    """Open stores (creating schemas idempotently, safe across concurrent starts) and wire.

    `reading`: for a command that only reads an existing log (cli/log_presence.py), which
    must not leave a workspace directory behind where it was run.
    """
    install_process_hooks()
    if not reading:
        settings.workspace_root.mkdir(parents=True, exist_ok=True)
        # Before anything is read or created in it (the log's note key is): a data
        # directory that is a file is then named as such (cli/startup_errors.py).
        settings.data_dir.mkdir(parents=True, exist_ok=True)
    app, store, projections, note_key = _log_and_read_models(settings, reading=reading)
    with schema_lock(settings):
        credentials = CredentialCache(store, settings.api_key)
        credentials.ensure_schema()
    # One cache of session -> workspace for the routes (Services), the approvals port and
    # learned delivery (what a session is told depends on its workspace).
    workspaces: dict[UUID, str] = {}
    learned = LearnedContext(store, workspace_of=partial(session_workspace, app, workspaces))
    # Budgets: a policy rule reads the session's and workspace's spend from memory.
    usage_figures = UsageFigures(store)
    active_policies = ActivePolicies(
        store,
        workspace_of=partial(session_workspace, app, workspaces),
        title_of=app.session_title,
        usage_of=usage_figures.for_call,
    )
    for projection in projections:
        if isinstance(projection, LearnedProjection):
            projection.on_change = learned.load
        if isinstance(projection, PoliciesProjection):
            projection.on_change = active_policies.load
    # Lets the requests a commit answers go before the runner applies it: 2 ms at most
    # (gateway median overhead ~15-25% lower, measured with the HTTP-signalled form).
    runner = ProjectionRunner(app, store, projections, commit_linger=COMMIT_LINGER_S)
    app.on_commit = runner.wake
    held = HeldApprovals(
        app.recorder, poll_s=settings.approval_poll_s, wakeups=approval_wakeups(settings)
    )
    app.on_recorded = partial(_recorded, runner, held)
    transport = HttpxHookTransport(settings.secrets)
    committer = GroupCommitter(app, on_batch=observe_batch)
    approvals = AppApprovals(
        app, store, partial(session_workspace, app, workspaces), REUSE_WITHIN_S
    )
    notifier = (
        ApprovalNotifier(
            transport,
            notify_handler(settings.approval_notify_url, settings.approval_notify_secret_env),
        )
        if settings.approval_notify_url
        else None
    )
    decision_export = (
        DecisionExport(
            settings.decision_export,
            otlp_sender(settings.decision_export),
            partial(links_at, store),
        )
        if settings.decision_export is not None and not reading
        else None
    )
    ingest = HookIngest(
        Rules(
            hooks=settings.hooks,
            approvals=ApprovalGate(settings.approvals, approvals, notifier),
            redacted_tools=settings.redacted_tools,
            record_facts=settings.record == RECORD_FULL,
            policy=active_policies,
        ),
        Ports(
            sessions=AppSessions(app, lambda sid: session_exists(store, str(sid))),
            dispatches=CommittedDispatches(app, committer),
            ask=partial(ask, transport),
            learned=learned.for_session,
            held=held,
        ),
        observe=observe_dispatch,
        export=decision_export.offer if decision_export is not None else None,
    )
    app.ensure_default_workspace(".")
    jobs: list[Job] = [
        Job("hook-audit-retention", lambda: prune_hook_audit_job(app), IntervalTrigger(hours=24)),
        Job(
            "approval-expiry",
            lambda: expire_orphaned_approvals_job(app, store),
            IntervalTrigger(seconds=30),
        ),
        # Signs a quiet tail: batches sign only while events keep arriving.
        Job(
            "log-note",
            lambda: sign_log_head(projections, store),
            IntervalTrigger(seconds=settings.log_note_every_s),
        ),
    ]
    if settings.witnesses:
        # Off the hot path: the latest checkpoint goes to the witnesses behind it.
        jobs.append(
            Job(
                "log-witness",
                partial(submit_to_witnesses, store, settings.witnesses),
                IntervalTrigger(seconds=settings.log_note_every_s),
            )
        )
    keys = KeyService(app)
    tokens = AttemptTokens(keys, runner, on_change=credentials.refresh)
    tasks = build_task_runtime(
        settings, app, store, partial(_ingest_from_thread, ingest), tokens, learned
    )
    jobs.extend(tasks.jobs())
    autonomy = AutonomyRuntime(settings, app, store, runner, transport, tasks)
    jobs.extend(autonomy.jobs())
    scheduler = SchedulerRuntime(instrument_jobs(jobs), timezone=settings.timezone)
    return Services(
        settings,
        app,
        store,
        projections,
        runner,
        scheduler,
        ingest,
        transport,
        credentials,
        keys,
        tasks=tasks,
        committer=committer,
        autonomy=autonomy,
        held=held,
        _session_workspaces=workspaces,
        learned=learned,
        note_key=note_key,
        active_policies=active_policies,
        policies=Policies(app, store, active_policies),
        decision_export=decision_export,
        usage=UsageRecorder(committer),
        usage_figures=usage_figures,
    )


def _ingest_from_thread(
    ingest: HookIngest, session_id: UUID, ev: LifecycleEvent, *, actor: str
) -> Ingested:
    """The task executor's hooks: HookIngest's one entry, from a thread with no loop."""
    return run_sync(ingest.ingest(session_id, ev, actor=actor))


def approval_wakeups(settings: Settings) -> PgApprovalWakeups | None:
    """Replicas share a PostgreSQL log: a decision on one wakes the request another holds."""
    if settings.database_url is None:
        return None
    return PgApprovalWakeups(settings.database_url.conninfo(), settings.database_schema)


def _recorded(
    runner: ProjectionRunner, held: HeldApprovals, recordings: list[Recording[UUID]]
) -> None:
    """Every durable save of this process: counted, handed to the runner, and told to
    requests waiting for an approval it may settle."""
    observe_recorded(recordings)
    runner.offer(r.notification for r in recordings)
    held.recorded(recordings)


def session_workspace(app: Tachograph, known: dict[UUID, str], session_id: UUID) -> str | None:
    """The workspace a session lives in, from the log; None for a session not created yet."""
    return session_target(app, known, session_id).workspace


def session_target(app: Tachograph, known: dict[UUID, str], session_id: UUID) -> SessionTarget:
    """What `session_id` names in the log: a Session (its workspace), another aggregate
    (its kind) or nothing.

    Sessions never move, so each Session's workspace is kept in `known` (bounded) once
    found: the hook routes check a bound token against it without a read.
    """
    found = known.get(session_id)
    if found is not None:
        return SessionTarget(found)
    try:
        session: object = app.repository.get(session_id)
    except AggregateNotFoundError:
        return SessionTarget()
    if not isinstance(session, Session):
        return SessionTarget(kind=type(session).__name__)
    if len(known) >= _SESSION_WORKSPACES_KEPT:
        known.clear()
    known[session_id] = session.workspace
    return SessionTarget(session.workspace)


SERVING_GC_THRESHOLD = 50_000


def freeze_startup_heap() -> None:
    """Exempt everything built before serving from the collector's full passes.

    Modules, routes, schemas and services live as long as the process, yet every
    full collection walked all of them again: under ingest load one ran about every
    two seconds and paused every request for ~65 ms here. Frozen, it took ~3 ms.
    For long-lived processes only (serve, worker, and serve's projections and OTLP
    receiver processes): frozen garbage is never freed.

    Young collections then wait for SERVING_GC_THRESHOLD objects instead of 700: a
    request's objects are nearly all freed by reference counting, yet the default
    threshold ran the collector every few requests. Ingest rose 7 % in six alternated
    pairs (docs/performance.md); the few collections left walk at most that many
    young objects, a few MB at worst.
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(SERVING_GC_THRESHOLD, *gc.get_threshold()[1:])
