"""The task executor: claims due tasks and runs each attempt in its own thread (the
command, its transcript, its hooks, its settlement). The jobs that drive it live in
scheduler/task_runtime.py.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol
from uuid import UUID

from domain.application import Tachograph
from domain.credentials import Binding
from domain.lifecycle import LifecycleEvent
from domain.task import Task
from domain.task_policy import (
    CANCELLING,
    classify_failure,
    truncate_utf8,
)
from domain.task_service import Claim, TaskService
from infra.executor import (
    CommandRunner,
    CommandSpec,
    RunResult,
    build_argv,
    describe_exit,
    task_env,
)
from infra.logs import log_context
from infra.settings import Settings
from projections.store import ReadStore
from projections.tasks import due_task_ids
from scheduler.attempt_tokens import AttemptTokens
from scheduler.self_update_cycle import SelfUpdateAttempt
from scheduler.transcript_writer import TranscriptWriter

log = logging.getLogger(__name__)


class TaskHooks(Protocol):
    """Hook ingestion as the executor uses it, from its own threads (TaskStart/TaskStop
    are observational); bootstrap.py drives HookIngest's one entry with it."""

    def __call__(self, session_id: UUID, ev: LifecycleEvent, *, actor: str) -> Any: ...


class StopCheck:
    """Asked every tick whether to stop; reads the task (cheaply, a few times a second)."""

    def __init__(
        self,
        service: TaskService,
        claim: Claim,
        worker: str,
        shutdown: threading.Event,
        interval_s: float = 0.25,
    ) -> None:
        self.service = service
        self.claim = claim
        self.worker = worker
        self.shutdown = shutdown
        self.interval_s = interval_s
        self._next = 0.0

    def __call__(self) -> str | None:
        if self.shutdown.is_set():
            return "shutdown"
        now = time.monotonic()
        if now < self._next:
            return None
        self._next = now + self.interval_s
        try:
            task = self.service.find(self.claim.task_id)
        except Exception:  # noqa: BLE001 - a database blip must not stop a healthy run
            return None
        if task is None or not task.is_current(self.claim.attempt) or task.worker != self.worker:
            return "lost"  # recovered elsewhere: this attempt no longer counts
        return "cancelled" if task.status == CANCELLING else None


class TaskExecutor:
    """Slots for concurrent attempts; claims due tasks while slots are free."""

    def __init__(
        self,
        settings: Settings,
        app: Tachograph,
        store: ReadStore,
        service: TaskService,
        runner: CommandRunner,
        hooks: TaskHooks | None,
        worker: str,
        tokens: AttemptTokens | None = None,
    ) -> None:
        assert settings.task_command is not None
        self.tokens = tokens
        self.settings = settings
        self.template = settings.task_command
        self.app = app
        self.store = store
        self.service = service
        self.runner = runner
        self.hooks = hooks
        self.worker = worker
        self.slots = int(settings.task_concurrency)
        self.shutting_down = threading.Event()
        self._lock = threading.Lock()
        self._poll_lock = threading.Lock()
        self._again = threading.Event()
        self._threads: dict[UUID, threading.Thread] = {}  # attempts holding a slot
        self._live: set[threading.Thread] = set()  # also those still refilling after it

    def owns(self, task_id: UUID) -> bool:
        with self._lock:
            return task_id in self._threads

    def running(self) -> int:
        with self._lock:
            return len(self._threads)

    def poll(self) -> int:
        """Claim due tasks into free slots; return how many attempts started."""
        if not self._poll_lock.acquire(blocking=False):
            self._again.set()  # the poller in progress goes round once more
            return 0
        started = 0
        try:
            while True:
                self._again.clear()
                started += self._fill()
                if not self._again.is_set() or self.shutting_down.is_set():
                    return started
        finally:
            self._poll_lock.release()

    def _fill(self) -> int:
        started = 0
        free = self.slots - self.running()
        if free <= 0 or self.shutting_down.is_set():
            return 0
        for task_id in due_task_ids(self.store, self.service.clock(), free * 4):
            if self.slots - self.running() <= 0 or self.shutting_down.is_set():
                break
            if self.owns(UUID(task_id)):
                continue
            claim = self.service.claim(UUID(task_id), self.worker)
            if claim is None:
                continue  # not due after all, or another worker won the claim
            thread = threading.Thread(
                target=self._run, args=(claim,), name=f"task-{task_id[:8]}", daemon=True
            )
            with self._lock:  # registered and started together: shutdown joins only started ones
                self._threads[claim.task_id] = thread
                self._live.add(thread)
                thread.start()
            started += 1
        return started

    def shutdown(self, timeout: float | None = None) -> None:
        """Stop every attempt (SIGTERM, grace, SIGKILL), record it, then return."""
        self.shutting_down.set()
        limit = timeout or self.runner.grace_s + self.runner.reap_wait_s + 15.0
        deadline = time.monotonic() + limit
        # Re-read until none is left: a refill poll racing the flag may start one more.
        while time.monotonic() < deadline:
            with self._lock:
                live = [t for t in self._live if t.is_alive()]
            if not live:
                return
            for thread in live:
                thread.join(max(deadline - time.monotonic(), 0.1))

    def _run(self, claim: Claim) -> None:
        ids = {"task_id": claim.task_id, "turn_id": claim.turn_id, "session_id": claim.session_id}
        try:
            with log_context(**ids):  # every line logged during the attempt carries them
                self._attempt(claim)
        except Exception:  # noqa: BLE001 - a bug in one attempt must not kill the worker
            log.exception("task attempt crashed", extra={"task_id": claim.task_id})
            self.settle_retrying(
                lambda: self.service.recover(
                    claim.task_id,
                    claim.attempt,
                    self.worker,
                    "the executor failed during the attempt",
                )
            )
        finally:
            with self._lock:
                self._threads.pop(claim.task_id, None)  # the slot is free again
            try:
                if not self.shutting_down.is_set():
                    self.poll()
            finally:
                with self._lock:
                    self._live.discard(threading.current_thread())

    def _attempt(self, claim: Claim) -> None:
        context = {"task_id": str(claim.task_id), "turn_id": claim.turn_id}
        log.info("task attempt %d started", claim.attempt, extra=context)
        self._hook(claim, "TaskStart", {})
        writer = TranscriptWriter(self.service, claim)
        writer.note("status", f"attempt {claim.attempt} started")
        workspace = self.app.get_workspace(claim.workspace)
        cwd = Path(self.settings.workspace_root, workspace.path).resolve()
        task = self.service.find(claim.task_id)
        try:
            if task is not None and self.contained(task):
                # Never in the registered checkout: a contained clone, phase by phase.
                SelfUpdateAttempt(self, claim, writer, cwd).run()
            else:
                self._execute(claim, writer, cwd, self.issue_token(claim))
        finally:
            self.revoke_token(claim)  # no-op when the attempt's end already revoked it

    def contained(self, task: Task) -> bool:
        """Self-update work, and the remediation of it, never runs in the checkout."""
        return self.service.self_update_work(task)

    def issue_token(self, claim: Claim, binding: Binding | None = None) -> str | None:
        if self.tokens is None:
            return None
        # Valid while the process may live: the attempt's timeout plus the kill grace.
        lifetime = self.runner.timeout_s + self.runner.grace_s
        return self.tokens.issue(
            claim.task_id, claim.attempt, claim.session_id, claim.turn_id, lifetime, binding
        )

    def revoke_token(self, claim: Claim) -> None:
        tokens = self.tokens
        if tokens is not None:
            self.settle_retrying(
                lambda: tokens.revoke(claim.task_id, claim.attempt, "the attempt ended")
            )

    def _execute(
        self, claim: Claim, writer: TranscriptWriter, cwd: Path, token: str | None
    ) -> None:
        env = task_env(
            dict(os.environ),
            drop=self.settings.secrets.keys(),
            task_id=str(claim.task_id),
            turn_id=claim.turn_id,
            session_id=str(claim.session_id),
            url=self.settings.url,
            workspace=claim.workspace,
            agent_token=token,
            secret_values=(
                self.settings.api_key,
                self.settings.coder_hook_secret,
                self.settings.log_signing_key,
                *self.settings.secrets.values(),
            ),
        )
        result = self.run_agent(claim, writer, self.command(claim, claim.prompt, cwd, env))
        # Revoked before the end is recorded: whoever sees the attempt settled finds the
        # token already refused.
        self.revoke_token(claim)
        self.finish(claim, writer, result)

    def command(
        self,
        claim: Claim,
        prompt: str,
        cwd: Path,
        env: dict[str, str],
        hook_settings: Path | None = None,
    ) -> CommandSpec:
        argv = build_argv(
            self.template,
            prompt=prompt,
            model=claim.model,
            task_id=str(claim.task_id),
            workspace=str(cwd),
            hook_settings=str(hook_settings) if hook_settings is not None else None,
        )
        return CommandSpec(argv=argv, cwd=cwd, env=env)

    def run_agent(self, claim: Claim, writer: TranscriptWriter, spec: CommandSpec) -> RunResult:
        """Run the agent once, until it exits or is stopped (and reaped, if it can be)."""
        context = {"task_id": str(claim.task_id), "turn_id": claim.turn_id}
        stop = StopCheck(self.service, claim, self.worker, self.shutting_down)

        def unreaped() -> None:
            detail = "the process could not be reaped after SIGKILL; it keeps its slot"
            log.error("task attempt interrupted: %s", detail, extra=context)
            writer.note("status", f"interrupted: {detail}")
            writer.flush()
            self.settle_retrying(
                lambda: self.service.mark_interrupted(claim.task_id, claim.attempt, detail)
            )

        return self.runner.run(spec, writer, stop, unreaped)

    def finish(
        self,
        claim: Claim,
        writer: TranscriptWriter,
        result: RunResult,
        settle: Callable[[], str] | None = None,
    ) -> None:
        """Record how the attempt's process ended (`settle`: how else to), fire TaskStop."""
        writer.note(*_ending(result, self.runner.timeout_s))
        writer.flush()
        if not result.reaped:
            return  # never reaped: the state stays running; recovery settles it later
        self.conclude(
            claim, settle or (lambda: self._settle(claim, result, writer)), describe_exit(result)
        )

    def conclude(self, claim: Claim, settle: Callable[[], str], how: str) -> None:
        """Make the attempt's end durable (through a database blip) and fire TaskStop."""
        context = {"task_id": str(claim.task_id), "turn_id": claim.turn_id}
        status = self.settle_retrying(settle)
        log.info("task attempt %d ended: %s", claim.attempt, status, extra=context)
        self._hook(claim, "TaskStop", {"status": status, "exit": how})

    def status_of(self, claim: Claim) -> str:
        task = self.service.find(claim.task_id)
        return task.status if task is not None else "deleted"

    def _settle(self, claim: Claim, result: RunResult, writer: TranscriptWriter) -> str:
        """Make the attempt's end durable (the process has been reaped)."""
        s = self.service
        if result.stopped == "lost":
            return "lost"
        if result.stopped == "shutdown":
            s.recover(claim.task_id, claim.attempt, self.worker, "the worker shut down")
        elif result.stopped == "cancelled":
            s.cancelled(claim.task_id, claim.attempt)
        elif result.stopped == "timeout":
            timeout = f"timed out after {self.runner.timeout_s:g} s"
            s.fail(claim.task_id, claim.attempt, "timeout", timeout)
        elif result.spawn_error is not None:
            error_class = result.spawn_error_class or "configuration"
            s.fail(claim.task_id, claim.attempt, error_class, result.spawn_error)
        elif result.exit_code == 0:
            s.complete(claim.task_id, claim.attempt, writer.stream.outcome)
        else:
            detail = writer.stream.last_error or _last_line(result.stderr_tail)
            evidence = "\n".join(t for t in (writer.stream.last_error, result.stderr_tail) if t)
            error_class = classify_failure(result.exit_code, evidence)
            message = describe_exit(result) + (f": {detail}" if detail else "")
            s.fail(claim.task_id, claim.attempt, error_class, message)
        return self.status_of(claim)

    def settle_retrying(self, record: Callable[[], Any]) -> Any:
        """Record through a database blip (bounded), so a reaped attempt is not left running.
        (Public: the self-update attempt records its own ends through it.)"""
        delay = 0.25
        for _ in range(6):
            try:
                return record()
            except Exception as exc:  # noqa: BLE001 - retried, then left to restart recovery
                log.warning("recording a task state failed; retrying: %r", exc)
                time.sleep(delay)
                delay = min(delay * 2, 4.0)
        return None

    def _hook(self, claim: Claim, event: str, detail: dict[str, Any]) -> None:
        if self.hooks is None:
            return
        ev = LifecycleEvent(
            event=event,
            event_id=f"{claim.turn_id}:{event}",
            turn_id=claim.turn_id,
            agent="tachograph-task",
            model=claim.model,
            detail={"taskId": str(claim.task_id), "attempt": claim.attempt, **detail},
        )
        try:
            self.hooks(claim.session_id, ev, actor="system")
        except Exception as exc:  # noqa: BLE001 - observational hooks never fail a task
            log.warning("%s hook failed: %s", event, exc, extra={"task_id": claim.task_id})


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return truncate_utf8(lines[-1], 1024) if lines else ""


def _ending(result: RunResult, timeout_s: float) -> tuple[str, str]:
    """The closing activity record of an attempt."""
    if result.spawn_error:
        return "error", result.spawn_error
    how = describe_exit(result)
    if result.stopped == "timeout":
        how = f"timed out after {timeout_s:g} s; {how}"
    elif result.stopped in ("cancelled", "shutdown"):
        how = f"stopped ({result.stopped}); {how}"
    if result.killed:
        how += " (after SIGKILL)"
    kind = "status" if result.exit_code == 0 and result.stopped is None else "error"
    return kind, how
