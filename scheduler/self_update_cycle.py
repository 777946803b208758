"""One attempt of a self-update task, in a contained clone and a fixed order of phases.

prepare → implement → inspect → review → commit, each recorded on the task's
`SelfUpdateCycle` with its evidence:

- prepare: the registered checkout must be a clean Git repository; its HEAD, branch
  and remotes' digest are captured, and it is cloned (no hardlinks, no remotes) into
  the data directory on the branch `tachograph/self-update/<taskId>`. A dirty or
  missing repository ends the cycle as a no-op that says why. The agent's jail
  (infra/jail.py) is made and probed; what it isolates is recorded item by item.
- implement: the agent runs in the clone with an environment holding no credential
  but its own agent token, `HOME` an empty per-attempt directory, and only the
  variables the operator allowed (TACHOGRAPH_SELF_UPDATE_ENV). Its token carries the
  self-update tool policy, so every PreToolUse it reports is checked by code first.
- inspect: the bounded patch of base..HEAD and its SHA-256; no change is a no-op.
- review: a second run of the agent, in a fresh checkout with a fresh HOME
  (scheduler/self_update_review.py), is shown the whole patch and must answer with
  its digest to approve (or, with TACHOGRAPH_SELF_UPDATE_REVIEW=operator, a person
  answers through POST /api/tasks/{id}/review within the timeout); anything else
  is a rejection, and nothing is imported. A patch too large to be shown whole to
  an agent reviewer fails the cycle before review.
- commit: the digest is checked against the clone again immediately before the
  commit is imported as `refs/tachograph/self-update/<taskId>` in the registered
  repository, whose working tree, index and branches are never touched, and only
  while its remotes are unchanged.

The registered checkout is never the agent's working directory.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import shlex
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit
from uuid import UUID

from domain.credentials import SELF_UPDATE_POLICY, Binding
from domain.lifecycle_events import (
    NOTIFICATION,
    POST_COMPACT,
    PRE_COMPACT,
    PRE_TOOL_USE,
    USER_PROMPT_SUBMIT,
    without,
)
from domain.self_update_cycle import CycleRecorder, self_update_ref
from domain.task_policy import CANCELLING
from infra.executor import RunResult, describe_exit
from infra.jail import Isolation, Jail, bwrap, installation
from infra.self_update_git.change import inspect_change
from infra.self_update_git.clone import checkout_state, prepare_clone
from infra.self_update_git.refs import ImportRefused, discard_ref, import_commit
from infra.self_update_git.results import Change, Clone
from infra.self_update_git.runner import GitError
from scheduler.self_update_review import (
    held_clone,
    instructions_above,
    make_reviewer_tree,
    review_area,
    review_prompt,
    unreviewable,
)

if TYPE_CHECKING:
    from domain.task_service import Claim
    from scheduler.attempt_host import AttemptHost
    from scheduler.transcript_writer import TranscriptWriter

log = logging.getLogger(__name__)

# What reaches the agent from the server's environment when nothing else is allowed.
BASE_ENV = ("PATH", "LANG", "LC_ALL", "TZ")
REVIEW_POLL_S = 0.5


class SelfUpdateAttempt:
    """Runs one attempt's phases and settles the task itself."""

    def __init__(
        self, executor: AttemptHost, claim: Claim, writer: TranscriptWriter, checkout: Path
    ) -> None:
        self.executor = executor
        self.claim = claim
        self.writer = writer
        self.checkout = checkout
        self.cycles = CycleRecorder(executor.app)
        self.base = (
            executor.settings.data_dir.resolve()
            / "self-update"
            / str(claim.task_id)
            / str(claim.attempt)
        )
        self.jail: Jail | None = None
        self.instructions: dict[str, str] = {}

    def run(self) -> None:
        try:
            self._phases()
        finally:
            if self.jail is not None:
                self.jail.close()
            # The evidence is in the log; the clone and its HOME are not kept.
            shutil.rmtree(self.base, ignore_errors=True)
            shutil.rmtree(held_clone(self.base), ignore_errors=True)

    # Phases

    def _phases(self) -> None:
        state = checkout_state(self.checkout)
        captured: dict[str, Any] = {
            "head": state.head,
            "branch": state.branch,
            "remotes_digest": state.remotes_digest,
        }
        if not state.eligible:
            reason = state.reason or "the registered checkout is not eligible"
            self._phase("prepare", "noop", {**captured, "reason": reason})
            self._complete(f"no-op: {reason}")
            return
        removed = remove_unrecorded_ref(self.cycles, self.checkout, self.claim.task_id)
        if removed is not None:
            captured["removed_ref"] = removed
        try:
            clone = prepare_clone(
                self.checkout,
                self.base / "clone",
                f"tachograph/self-update/{self.claim.task_id}",
                base=state.head,  # the commit that was checked, not whatever HEAD is now
            )
        except GitError as exc:
            self._phase("prepare", "failed", {**captured, "reason": str(exc)})
            self._fail("infrastructure", f"preparing the clone failed: {exc}")
            return
        captured.update(self._enter_jail())
        missing = captured["isolation_missing"]
        if self.executor.settings.self_update_sandbox == "strict" and missing:
            why = "; ".join(f"{item}: {seen}" for item, seen in missing.items())
            self._phase("prepare", "failed", {**captured, "reason": why})
            self._fail("infrastructure", f"the agent's jail is incomplete: {why}")
            return
        self._phase(
            "prepare",
            "ok",
            {**captured, "clone_path": str(clone.path), "clone_branch": clone.branch},
        )
        home = self.base / "home"
        home.mkdir(parents=True, exist_ok=True)
        token = self.executor.issue_token(
            self.claim, Binding(policy=SELF_UPDATE_POLICY, root=str(clone.path))
        )
        env = self._contained_env(token, home)
        self.instructions = instructions_above(clone.path)  # the operator's, if any

        result = self._agent(self.claim.prompt, clone.path, env)
        if not _succeeded(result):
            self._phase("implement", "failed", {"exit": _exit(result)})
            self.executor.revoke_token(self.claim)
            self.executor.finish(self.claim, self.writer, result)
            return
        summary = self.writer.stream.outcome
        self._phase("implement", "ok", {"exit": _exit(result), "summary": summary})

        change = inspect_change(clone)
        if change.noop:
            self._phase("inspect", "noop", {"summary": summary})
            self._complete(f"no-op: the agent changed nothing. {summary or ''}".strip())
            return
        if change.problem is not None:
            self._phase("inspect", "failed", _inspected(change))
            self._fail("validation", f"inspection refused the change: {change.problem}")
            return
        settings = self.executor.settings
        by_operator = settings.self_update_review == "operator"
        reviewer = {"review_by": "operator" if by_operator else "agent"}
        too_big = (
            None if by_operator else unreviewable(change, settings.self_update_review_max_bytes)
        )
        if too_big is not None:
            self._phase("inspect", "failed", {**_inspected(change), **reviewer, "problem": too_big})
            self._fail("validation", f"the change cannot be reviewed: {too_big}")
            return
        self._phase("inspect", "ok", {**_inspected(change), **reviewer})
        if by_operator:
            self.executor.revoke_token(self.claim)  # the agent's part is over
            approved, evidence = self._operator_review(change)
        else:
            approved, evidence = self._agent_review(change, clone, env)
        if approved is None:
            return  # stopped (cancelled or shutting down) while waiting: already settled
        if not approved:
            self._phase("review", "rejected", evidence)
            self._complete("review rejected the change; nothing was imported")
            return
        self._phase("review", "ok", evidence)

        ref = self_update_ref(self.claim.task_id)
        try:
            commit = import_commit(
                self.checkout,
                clone,
                expected_digest=change.digest,
                expected_remotes_digest=state.remotes_digest or "",
                ref=ref,
            )
        except (ImportRefused, GitError) as exc:
            self._phase("commit", "failed", {"digest": change.digest, "reason": str(exc)})
            self._fail("validation", f"the commit was not imported: {exc}")
            return
        self._phase("commit", "ok", {"digest": change.digest, "ref": ref, "commit": commit})
        self._complete(f"imported {commit[:12]} as {ref}")

    # Review

    def _agent_review(
        self, change: Change, clone: Clone, env: dict[str, str]
    ) -> tuple[bool | None, dict[str, Any]]:
        """A second run of the agent, in a fresh checkout of exactly the patch with a fresh
        HOME, must answer with the digest it was shown."""
        evidence: dict[str, Any] = {"digest": change.digest, "by": "agent"}
        review = None
        try:
            with review_area(self.base, clone.path) as area:
                unfit = make_reviewer_tree(
                    self.checkout, change, area.tree, clone.branch, self.instructions
                )
                if unfit is None:
                    self.writer.new_run()  # the verdict must be the reviewer's own words
                    env = area.env(env, self.base)
                    review = self._agent(review_prompt(change), area.tree, env)
        except OSError as exc:
            unfit = ("infrastructure", f"the reviewer's area could not be made: {exc}")
        if unfit is not None or review is None:
            kind, reason = unfit or ("infrastructure", "the reviewer did not run")
            self._phase("review", "failed", {**evidence, "reason": reason})
            self._fail(kind, f"the change was not reviewed: {reason}")
            return None, evidence
        verdict = self.writer.stream.outcome or ""
        self.executor.revoke_token(self.claim)
        approved = _succeeded(review) and f"APPROVE {change.digest}" in verdict
        evidence.update(verdict=verdict[-2000:], exit=_exit(review))
        return approved, evidence

    def _operator_review(self, change: Change) -> tuple[bool | None, dict[str, Any]]:
        """Wait (holding the slot) for POST /api/tasks/{id}/review, until the timeout."""
        settings = self.executor.settings
        deadline = time.monotonic() + settings.self_update_review_timeout_s
        self.writer.note("status", f"waiting for an operator's review of {change.digest}")
        self.writer.flush()
        evidence: dict[str, Any] = {"digest": change.digest, "by": "operator"}
        while time.monotonic() < deadline:
            decided = self.cycles.decision(self.claim.task_id, self.claim.attempt)
            if decided is not None:
                evidence.update(
                    actor=decided["actor"],
                    echoed=decided["digest"],
                    reason=decided["reason"],
                    verdict="approved" if decided["approve"] else "rejected",
                )
                return bool(decided["approve"]), evidence
            if self._stopped():
                return None, evidence
            time.sleep(REVIEW_POLL_S)
        evidence["verdict"] = "timed out"
        return False, evidence

    def _stopped(self) -> bool:
        """Cancelled or shutting down: settle the attempt as the executor would."""
        if self.executor.shutting_down.is_set():
            self._conclude(
                lambda: self.executor.service.recover(
                    self.claim.task_id,
                    self.claim.attempt,
                    self.executor.worker,
                    "the worker shut down",
                ),
                "stopped (shutdown) while awaiting review",
            )
            return True
        task = self.executor.service.find(self.claim.task_id)
        if task is not None and task.status == CANCELLING:
            self._conclude(
                lambda: self.executor.service.cancelled(self.claim.task_id, self.claim.attempt),
                "stopped (cancelled) while awaiting review",
            )
            return True
        return False

    # Pieces

    def _agent(self, prompt: str, clone: Path, env: dict[str, str]) -> RunResult:
        settings = write_hook_settings(self.base / "claude-settings.json")
        spec = self.executor.command(self.claim, prompt, clone, env, hook_settings=settings)
        if self.jail is not None:
            spec = dataclasses.replace(spec, argv=self.jail.wrap(spec.argv))
        return self.executor.run_agent(self.claim, self.writer, spec)

    def _enter_jail(self) -> dict[str, Any]:
        """Make the agent's jail as far as this machine allows (unless the setting says
        none), and say what it really isolates: each item as a probe inside observed it."""
        settings = self.executor.settings
        own = _loopback_port(settings.url)
        binary = bwrap()
        if settings.self_update_sandbox == "none":
            isolation = Isolation.none("TACHOGRAPH_SELF_UPDATE_SANDBOX=none")
        elif own is None:
            isolation = Isolation.none(f"TACHOGRAPH_URL {settings.url} is not a loopback address")
        elif binary is None:
            isolation = Isolation.none("bwrap (bubblewrap) is not on PATH")
        else:
            ports = (own, *settings.self_update_forward)
            # Tachograph's installation stays visible, read-only: the hooks run it.
            hidden, show = self._hidden(), installation()
            candidate = Jail(binary, ports, hidden, keep=[self.base], show=show)
            isolation = candidate.probe()
            if any(isolation.held.values()):
                self.jail = candidate  # runs with what there is; the evidence says what
            else:
                candidate.close()  # bwrap could not start at all
        evidence: dict[str, Any] = {
            "sandbox": settings.self_update_sandbox,
            "jail": "bubblewrap" if self.jail is not None else "none",
            "isolation": isolation.held,
            "isolation_missing": isolation.missing,
        }
        if self.jail is not None:
            jailed = self.jail
            evidence.update(
                hidden=jailed.hidden, shown=jailed.show, forwarded=sorted(jailed.forwards)
            )
        return evidence

    def _hidden(self) -> list[Path]:
        """What the jail covers besides /run and /tmp: the data directory (stores, keys,
        other attempts), the workspaces and the registered checkout."""
        settings = self.executor.settings
        return [p.resolve() for p in (settings.data_dir, settings.workspace_root, self.checkout)]

    def _contained_env(self, token: str | None, home: Path) -> dict[str, str]:
        allowed = (*BASE_ENV, *self.executor.settings.self_update_env)
        env = {k: os.environ[k] for k in allowed if k in os.environ}
        tmp = self.base / "tmp"
        tmp.mkdir(parents=True, exist_ok=True)
        env.update(
            {
                "HOME": str(home),
                "TMPDIR": str(tmp),
                # Where the command hook notes delivery failures: never the clone.
                "TACHOGRAPH_HOOK_LOG": str(self.base / "hooks" / "hooks.log"),
                "TACHOGRAPH_TASK_ID": str(self.claim.task_id),
                "TACHOGRAPH_TURN_ID": self.claim.turn_id,
                "TACHOGRAPH_SESSION_ID": str(self.claim.session_id),
                "TACHOGRAPH_URL": self.executor.settings.url,
                "TACHOGRAPH_WORKSPACE": self.claim.workspace,
            }
        )
        if token is not None:
            env["TACHOGRAPH_AGENT_TOKEN"] = token
        return env

    def _phase(self, phase: str, status: str, evidence: dict[str, Any]) -> None:
        self.writer.note("status", f"self-update {phase}: {status}")
        self.writer.flush()
        self.executor.settle_retrying(
            lambda: self.cycles.record(
                self.claim.task_id,
                self.claim.workspace,
                self.claim.attempt,
                phase,
                status,
                evidence,
            )
        )

    def _complete(self, outcome: str) -> None:
        self._conclude(
            lambda: self.executor.service.complete(self.claim.task_id, self.claim.attempt, outcome),
            outcome,
        )

    def _fail(self, error_class: str, error: str) -> None:
        self._conclude(
            lambda: self.executor.service.fail(
                self.claim.task_id, self.claim.attempt, error_class, error
            ),
            error,
        )

    def _conclude(self, record: Callable[[], object], how: str) -> None:
        self.executor.revoke_token(self.claim)

        def settle() -> str:
            record()
            return self.executor.status_of(self.claim)

        self.executor.conclude(self.claim, settle, how)


# Claude Code's events, as command hooks: they read the agent's token, session and URL
# from its environment, and the gate events are fail-closed (an unreachable Tachograph
# denies the call instead of letting it through unchecked).
# The cycle's run has no compaction or notifications worth a hook; only the prompt and
# tool gates are fail-closed (a Stop that cannot be answered must not keep the run going).
HOOK_EVENTS = without(PRE_COMPACT, POST_COMPACT, NOTIFICATION)
GATE_EVENTS = frozenset({USER_PROMPT_SUBMIT, PRE_TOOL_USE})


def remove_unrecorded_ref(
    cycles: CycleRecorder, checkout: Path, task_id: UUID
) -> dict[str, str] | None:
    """Delete the task's ref if no commit phase recorded it: a process killed between
    the import and its record left it, so it never landed. What was removed, if anything."""
    if cycles.landed(task_id):
        return None
    ref = self_update_ref(task_id)
    commit = discard_ref(checkout, ref)
    return None if commit is None else {"ref": ref, "commit": commit}


def _loopback_port(url: str) -> int | None:
    parts = urlsplit(url)
    if parts.hostname not in ("127.0.0.1", "localhost", "::1"):
        return None
    return parts.port or (443 if parts.scheme == "https" else 80)


def write_hook_settings(path: Path) -> Path:
    """A Claude Code settings file (for `--settings {hookSettings}`) outside the clone."""
    # -I: the hook runs in the clone, whose files are the agent's. Without it Python would
    # import `api` from there first when the workspace is Tachograph's own repository.
    command = shlex.join([sys.executable, "-I", "-m", "cli.main", "hook", "claude"])
    hooks = {
        event: [
            {
                "matcher": "*",
                "hooks": [
                    {
                        "type": "command",
                        "command": f"{command} {event}"
                        + (" --fail-closed" if event in GATE_EVENTS else ""),
                    }
                ],
            }
        ]
        for event in HOOK_EVENTS
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"hooks": hooks}, indent=2))
    return path


def _succeeded(result: RunResult) -> bool:
    return result.reaped and result.stopped is None and result.exit_code == 0


def _exit(result: RunResult) -> str:
    return describe_exit(result)


def _inspected(change: Change) -> dict[str, Any]:
    return {
        "digest": change.digest,
        "bytes": change.size,
        "files": [[status, path] for status, path in change.files],
        "commits": change.commits,
        "problem": change.problem,
        # Every byte, as the reviewer is shown it: not UTF-8 as \xNN.
        "patch": change.patch.decode("utf-8", errors="backslashreplace"),
    }
