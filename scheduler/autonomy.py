"""Autonomy jobs: the signal worker (deriving, then reflecting), idle self-update cycles,
reconcile.

Jobs stay thin: the read models say where to look; the domain services re-check every
rule on aggregates and make each decision exclusive through optimistic concurrency.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

from apscheduler.triggers.interval import IntervalTrigger

from domain.application import Tachograph
from domain.autonomy_service import AutonomyService
from domain.errors import RuleViolation
from domain.reflection import Reflector
from domain.self_update_service import ReconcileResult, SelfUpdatePlan, SelfUpdateService
from domain.signal_service import SignalService
from domain.task_service import utcnow
from infra.hook_wire import HookTransport
from infra.reflector import build_reflector, parse_reflector_config
from infra.settings import Settings
from projections.learned import list_targets
from projections.runner import ProjectionRunner
from projections.self_update import busy, reconcile_workspaces, self_update_candidates
from projections.signals import due_signal_ids
from projections.store import ReadStore
from projections.turn_signals import pending_candidates
from scheduler.runtime import Job
from scheduler.task_runtime import TaskRuntime

log = logging.getLogger(__name__)

# How long a job waits for the read models to hold the whole log before looking.
SETTLE_S = 2.0
# Finished turns made signals per worker run; the rest wait for the next run.
DERIVE_BATCH = 500


class AutonomyRuntime:
    """Autonomy services of one process and their scheduled entry points."""

    def __init__(
        self,
        settings: Settings,
        app: Tachograph,
        store: ReadStore,
        runner: ProjectionRunner,
        transport: HookTransport,
        tasks: TaskRuntime,
        *,
        clock: Callable[[], datetime] = utcnow,
        reflector: Reflector | None = None,
    ) -> None:
        self.settings = settings
        self.app = app
        self.store = store
        self.runner = runner
        self.worker_id = tasks.worker_id
        config = parse_reflector_config(
            settings.reflector,
            allowed_hosts=settings.hook_allowed_hosts,
            allow_insecure_loopback=settings.hook_allow_insecure_loopback,
        )
        self.reflector = reflector or build_reflector(config, transport)
        self.autonomy = AutonomyService(app, clock=clock)
        self.signals = SignalService(
            app,
            self.autonomy,
            clock=clock,
            claim_ttl=timedelta(seconds=settings.signal_claim_ttl_s),
        )
        plan = SelfUpdatePlan(cron=settings.self_update_cron)
        tasks.schedules.fire_times(plan.cron)  # refuse to start with a cron that never fires
        self.self_update = SelfUpdateService(app, tasks.service, tasks.schedules, plan, clock=clock)
        # Candidates up to here are signals already (or were refused): not looked at again.
        self.derived_up_to = 0

    def jobs(self) -> list[Job]:
        """Thin scheduled entry points."""
        s = self.settings
        return [
            Job("autonomy.reflect", self.reflect, IntervalTrigger(seconds=s.reflection_interval_s)),
            Job("autonomy.idle", self.idle, IntervalTrigger(seconds=s.self_update_idle_interval_s)),
            Job(
                "autonomy.reconcile",
                self.reconcile,
                IntervalTrigger(seconds=s.self_update_reconcile_interval_s),
            ),
        ]

    def settle(self) -> None:
        """Let the read models reach the log head (bounded) so the job looks at fresh rows."""
        self.runner.wait_for(self.app.recorder.max_notification_id() or 0, SETTLE_S)

    def derive(self) -> int:
        """Record a signal for each turn that finished while evolution was on; returns how
        many are new (another replica may have recorded the others: the same signals)."""
        made = 0
        for row in pending_candidates(self.store, self.derived_up_to, DERIVE_BATCH):
            try:
                _, created = self.signals.record(
                    row["agent_id"],
                    row["trace_id"],
                    row["kind"],
                    row["goal"],
                    row["outcome"],
                    row["failure"],
                    row["failure_class"],
                    UUID(row["session_id"]) if row["session_id"] else None,
                    "system",
                    turn_id=row["turn_id"],
                    received=row["received"],
                    workspace_id=self.signals.workspace_of(
                        UUID(row["session_id"]) if row["session_id"] else None,
                        UUID(row["task_id"]) if row["task_id"] else None,
                    ),
                )
                made += created
            except RuleViolation as exc:  # a candidate no signal can hold: never retried
                log.warning("turn not made a signal: %s", exc, extra={"trace_id": row["trace_id"]})
            self.derived_up_to = int(row["position"])
        return made

    def reflect(self) -> dict[str, int]:
        """Make signals of finished turns, claim a batch of due ones, reflect on each."""
        self.settle()
        if self.derive():
            self.settle()  # the new signals are due now
        now = self.signals.clock()
        claims = [
            claim
            for sid in due_signal_ids(self.store, now, self.settings.reflection_batch)
            if (claim := self.signals.claim(UUID(sid), self.worker_id)) is not None
        ]
        outcomes: dict[str, int] = {}
        for claim in claims:
            self.settle()  # the previous signal may have changed this agent's targets
            targets = self.targets_of(claim.evidence.agent_id, claim.evidence.workspace_id)
            status = self.signals.reflect(claim, self.reflector, targets)
            outcomes[status] = outcomes.get(status, 0) + 1
        return outcomes

    def targets_of(self, agent_id: str, workspace_id: str | None) -> list[dict[str, Any]]:
        """The agent's current evolution-managed targets in the workspace the evidence
        came from, as the reflector sees them."""
        rows = list_targets(
            self.store,
            kind=None,
            agent_id=agent_id,
            evolution_managed=True,
            workspace_id=workspace_id,
        )
        return [
            {k: r[k] for k in ("kind", "key", "content", "contentDigest", "latestRevisionId")}
            for r in rows
        ]

    def idle(self) -> UUID | None:
        """Release a settled gate; when idle, start the least recently cycled workspace."""
        self.self_update.release_if_settled()
        if not self.self_update.enabled():
            return None
        self.settle()
        now = self.self_update.clock()
        if busy(self.store, now):
            return None
        task_id = self.self_update.materialise(
            UUID(s) for s in self_update_candidates(self.store, now)
        )
        if task_id is not None:
            log.info("self-update cycle started", extra={"task_id": str(task_id)})
        return task_id

    def reconcile(self) -> ReconcileResult:
        """Keep one system schedule per eligible workspace; pause the ineligible ones."""
        self.settle()
        return self.self_update.reconcile(reconcile_workspaces(self.store))
