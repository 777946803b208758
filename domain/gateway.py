"""Hook gateway: runs the managed hook policy on a lifecycle event and records the outcome."""

from __future__ import annotations

import logging
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from uuid import UUID, uuid5

from eventsourcing.domain import Aggregate
from eventsourcing.persistence import IntegrityError

from domain.application import Recorded, Tachograph
from domain.errors import NotFound
from domain.group_commit import Deliver, Submit
from domain.hook_config import HookConfig, HookHandler
from domain.hook_dispatch import (
    DispatchRequest,
    DispatchResult,
    HandlerRun,
    HookTransport,
    match_key,
    redact_tool_input,
    run_dispatch,
)
from domain.hook_dispatch_record import HookDispatch, creation_event, dispatch_id_for
from domain.ids import PROJECT_NAMESPACE

log = logging.getLogger(__name__)

TITLE_CHARS = 80
SUMMARY_CHARS = 500


@dataclass(frozen=True)
class IngestEvent:
    """A lifecycle event from an agent runtime, already in the normalised vocabulary."""

    event: str
    event_id: str | None = None
    turn_id: str | None = None
    agent: str | None = None
    agent_session_id: str | None = None
    tool_name: str | None = None
    tool_call_id: str | None = None
    tool_input: Any = None
    tool_response: Any = None
    prompt: str | None = None
    last_assistant_message: str | None = None
    subagent_id: str | None = None
    model: str | None = None
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class IngestResult:
    """The combined decision, its dispatch ID and where (whether) it was recorded."""

    dispatch_id: UUID
    outcome: str
    reason: str | None
    additional_context: str | None
    replacement: Any
    position: int | None
    recorded: bool
    duplicate: bool = False

    def recorded_at(self, position: int | None) -> IngestResult:
        """This decision, durably recorded at `position`.

        `dataclasses.replace` without its field introspection: on the hot ingest path
        this runs once per event on the event loop.
        """
        return IngestResult(
            self.dispatch_id,
            self.outcome,
            self.reason,
            self.additional_context,
            self.replacement,
            position,
            True,
            self.duplicate,
        )

    def decision(self) -> dict[str, Any]:
        """Wire shape of SPEC §6.3: absent optional fields are left out."""
        body: dict[str, Any] = {"outcome": self.outcome}
        if self.reason is not None:
            body["reason"] = self.reason
        if self.additional_context is not None:
            body["additionalContext"] = self.additional_context
        if self.replacement is not None:
            body["replacement"] = self.replacement
        body["dispatchId"] = str(self.dispatch_id)
        return body


# A code-owned tool policy: (rule, reason) when it refuses a tool call, else None. It is
# given the tool, its input and the runtime's working directory (absolute, or None).
ToolPolicy = Callable[[str | None, Any, str | None], tuple[str, str] | None]
POLICY_HANDLER = "tachograph-policy"


def policy_denial(refused: tuple[str, str], runs: list[HandlerRun]) -> DispatchResult:
    """A deny by the fixed policy, recorded as a run naming the rule that fired."""
    rule, reason = refused
    run = HandlerRun(f"{POLICY_HANDLER}:{rule}", "deny", None, reason, 0)
    return DispatchResult("deny", reason, None, None, [*runs, run])


def _working_directory(ev: IngestEvent) -> str | None:
    """The `cwd` a runtime reported with the call (Claude Code does), when absolute:
    relative paths in the call are judged from there, not from the clone's root."""
    cwd = ev.detail.get("cwd")
    return cwd if isinstance(cwd, str) and cwd.startswith("/") else None


def agent_session_uuid(key: str) -> UUID:
    """UUIDv5 of "<agent>:<agentSessionId>" (or "coder:<chatId>") in the project namespace."""
    return uuid5(PROJECT_NAMESPACE, key)


def first_line(text: str | None, limit: int) -> str | None:
    if not text:
        return None
    line = text.strip().splitlines()[0].strip() if text.strip() else ""
    return line[:limit] or None


# How many live sessions a process remembers without a read-model lookup.
KNOWN_SESSIONS_KEPT = 65_536


class HookGateway:
    """Dispatches hooks for one event and appends a HookDispatch; never re-enters hooks."""

    def __init__(
        self,
        app: Tachograph,
        config: HookConfig,
        transport: HookTransport,
        redacted_tools: frozenset[str],
        *,
        session_known: Callable[[UUID], bool],
        stop_continues: Callable[[UUID, str | None], int],
        record: Callable[[HookDispatch], int | None] | None = None,
        submit: Submit | None = None,
        on_dispatch: Callable[[str, DispatchResult], None] | None = None,
    ) -> None:
        self.app = app
        self.config = config
        self.transport = transport
        self.redacted_tools = redacted_tools
        # Read-model lookups injected by the composition root (domain cannot import them).
        self._session_known = session_known
        self._stop_continues = stop_continues
        # The ingest hot path appends through a group committer when one is wired.
        self._record = record or app.record
        self._submit = submit
        # Observer of every decided dispatch (metrics per handler); must never raise.
        self._on_dispatch = on_dispatch or (lambda event, result: None)
        # Sessions this process has seen live: lets the hot path skip a lookup. A session
        # deleted by another replica may still take events here; the read models drop them.
        # Bounded (oldest first out): a forgotten session costs one lookup, never an error.
        self._known_sessions: dict[UUID, None] = {}

    def knows_session(self, session_id: UUID) -> bool:
        """Whether this process has seen the session live (accepted without a lookup)."""
        return session_id in self._known_sessions

    def require_session(self, session_id: UUID) -> None:
        """Raise NotFound unless the session exists and is live."""
        if session_id in self._known_sessions:
            return
        if not self._session_known(session_id):
            self.app.get_session(session_id)  # falls back to the log; raises NotFound
        self._remember(session_id)

    def _remember(self, session_id: UUID) -> None:
        known = self._known_sessions
        if len(known) >= KNOWN_SESSIONS_KEPT:
            del known[next(iter(known))]
        known[session_id] = None

    def ensure_session(
        self,
        session_id: UUID,
        *,
        workspace: str,
        agent: str | None,
        agent_session_id: str | None,
    ) -> None:
        """Create an agent's session on first sight (a concurrent create is fine)."""
        # Seen live by this process: no read-model query on every hook of the session.
        if session_id in self._known_sessions or self._session_known(session_id):
            return
        try:
            self.app.get_session(session_id)
            return
        except NotFound:
            pass
        with suppress(IntegrityError):  # another request created it first
            self.app.create_session(
                workspace,
                None,
                "system",
                agent=agent,
                agent_session_id=agent_session_id,
                session_id=session_id,
            )

    def open_session(
        self, workspace: str, title: str | None, actor: str, **kwargs: Any
    ) -> tuple[Recorded, IngestResult]:
        """Create a session, then dispatch its SessionStart."""
        recorded = self.app.create_session(workspace, title, actor, **kwargs)
        started = self.ingest(
            recorded.aggregate_id,
            IngestEvent(event="SessionStart", agent=kwargs.get("agent"), detail={"source": "api"}),
            actor=actor,
        )
        return recorded, started

    def close_session(self, session_id: UUID, actor: str) -> int | None:
        """Dispatch SessionEnd first, then delete the session (SPEC §5)."""
        self.app.get_session(session_id)
        self.ingest(
            session_id, IngestEvent(event="SessionEnd", detail={"reason": "deleted"}), actor=actor
        )
        self._known_sessions.pop(session_id, None)
        return self.app.delete_session(session_id, actor).position

    def ingest(
        self,
        session_id: UUID,
        ev: IngestEvent,
        *,
        actor: str,
        annotate: Callable[[dict[str, Any]], str | None] | None = None,
        policy: ToolPolicy | None = None,
    ) -> IngestResult:
        """Run matching handlers, record the dispatch durably, return the decision.

        `annotate` lets an adapter say, in the audit record, how it will render the
        decision for its agent (e.g. "Claude Code cannot rewrite a prompt: blocked").
        """
        dispatch_id = dispatch_id_for(ev.event_id)
        handlers = self.config.handlers_for(ev.event, self._match_subject(ev))
        if ev.event_id and handlers:
            # Don't re-run handlers for a retried event: answer with the stored decision.
            stored = self._stored(dispatch_id)
            if stored is not None:
                return stored
        fields, decided = self._decide(
            session_id, ev, dispatch_id, handlers, actor, annotate, policy
        )
        try:
            position = self._record(HookDispatch(**fields))
        except IntegrityError:
            stored = self._stored(dispatch_id)
            if stored is not None:
                return stored
            raise
        except Exception:  # noqa: BLE001 - a recording failure never changes the outcome
            log.exception("hook dispatch could not be recorded", extra={"dispatch_id": dispatch_id})
            return decided
        if session_id not in self._known_sessions:
            self._remember(session_id)
        return decided.recorded_at(position)

    def start_ingest(
        self,
        session_id: UUID,
        ev: IngestEvent,
        *,
        actor: str,
        reply: Callable[[IngestResult | IntegrityError], None],
        deliver: Deliver | None = None,
        annotate: Callable[[dict[str, Any]], str | None] | None = None,
        policy: ToolPolicy | None = None,
    ) -> bool:
        """Begin an ingest that needs no blocking I/O; False when it needs `ingest` instead.

        The hot path: a known session and no matching handlers. `reply` gets the
        result once the dispatch is durable (through `deliver`, when given: see
        `GroupCommitter.enqueue`). A duplicate eventId gets it an IntegrityError, so
        the caller takes the blocking path, which answers with the stored decision.
        `annotate` as for `ingest`.
        """
        if self._submit is None or session_id not in self._known_sessions:
            return False
        if self.config.handlers_for(ev.event, self._match_subject(ev)):
            return False
        dispatch_id = dispatch_id_for(ev.event_id)
        fields, decided = self._decide(session_id, ev, dispatch_id, [], actor, annotate, policy)

        def settle(outcome: int | BaseException) -> None:
            if isinstance(outcome, int):
                reply(decided.recorded_at(outcome))
            elif isinstance(outcome, IntegrityError):
                reply(outcome)
            else:
                log.error("hook dispatch could not be recorded: %s", outcome)
                reply(decided)

        self._submit(dispatch_id, [creation_event(**fields)], settle, deliver)
        return True

    def _decide(
        self,
        session_id: UUID,
        ev: IngestEvent,
        dispatch_id: UUID,
        handlers: list[HookHandler],
        actor: str,
        annotate: Callable[[dict[str, Any]], str | None] | None,
        policy: ToolPolicy | None = None,
    ) -> tuple[dict[str, Any], IngestResult]:
        """The decision, and the fields of the HookDispatch that records it."""
        tool_input = redact_tool_input(ev.tool_name, ev.tool_input, self.redacted_tools)
        tool_response = redact_tool_input(ev.tool_name, ev.tool_response, self.redacted_tools)
        fixed = policy if policy is not None and ev.event == "PreToolUse" else None
        cwd = _working_directory(ev) if fixed is not None else None
        refused = fixed(ev.tool_name, ev.tool_input, cwd) if fixed is not None else None
        if refused is not None:
            # A code-owned policy comes first: no handler is asked about a refused call.
            result = policy_denial(refused, [])
        elif handlers:
            request = DispatchRequest(
                event_id=ev.event_id or str(dispatch_id),
                event=ev.event,
                session_id=str(session_id),
                turn_id=ev.turn_id,
                tool_call_id=ev.tool_call_id,
                tool_name=ev.tool_name,
                agent=ev.agent,
                model=ev.model,
                timestamp=datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
                detail=self._detail(ev, tool_input, tool_response),
            )
            continues = self._stop_continues(session_id, ev.turn_id) if ev.event == "Stop" else 0
            result = run_dispatch(
                request, handlers, self.transport, stop_continues_so_far=continues
            )
            if fixed is not None and result.outcome == "modify":
                # ... and again on what a handler rewrote the call to.
                rewritten = fixed(ev.tool_name, result.replacement, cwd)
                if rewritten is not None:
                    result = policy_denial(rewritten, result.runs)
        else:
            result = DispatchResult("pass", None, None, None, [])
        try:
            self._on_dispatch(ev.event, result)
        except Exception:  # noqa: BLE001 - observation never changes a decision
            log.exception("dispatch observer failed")
        decided = IngestResult(
            dispatch_id=dispatch_id,
            outcome=result.outcome,
            reason=result.reason,
            additional_context=result.additional_context,
            replacement=result.replacement,
            position=None,
            recorded=False,
        )
        note = annotate(decided.decision()) if annotate is not None else None
        fields = dict(
            dispatch_id=dispatch_id,
            session_id=session_id,
            event_name=ev.event,
            event_id=ev.event_id,
            turn_id=ev.turn_id,
            agent=ev.agent,
            agent_session_id=ev.agent_session_id,
            tool_name=ev.tool_name,
            tool_call_id=ev.tool_call_id,
            subagent_id=ev.subagent_id,
            outcome=result.outcome,
            reason=result.reason,
            additional_context=result.additional_context,
            replacement=result.replacement,
            runs=[
                {
                    "handlerId": r.handler_id,
                    "outcome": r.outcome,
                    "failure": r.failure,
                    "reason": r.reason,
                    "durationMs": r.duration_ms,
                    "continueCapped": r.continue_capped,
                }
                for r in result.runs
            ],
            title_hint=first_line(ev.prompt, TITLE_CHARS)
            if ev.event == "UserPromptSubmit"
            else None,
            summary_hint=(ev.last_assistant_message or "")[:SUMMARY_CHARS] or None
            if ev.event == "Stop"
            else None,
            note=note,
            actor=actor,
        )
        return fields, decided

    def _stored(self, dispatch_id: UUID) -> IngestResult | None:
        try:
            stored: Aggregate = self.app.repository.get(dispatch_id)
        except Exception:  # noqa: BLE001 - AggregateNotFoundError or the store is down
            return None
        if not isinstance(stored, HookDispatch):
            return None
        return IngestResult(
            dispatch_id=dispatch_id,
            outcome=stored.outcome,
            reason=stored.reason,
            additional_context=stored.additional_context,
            replacement=stored.replacement,
            position=self.app.recorder.max_notification_id(),
            recorded=True,
            duplicate=True,
        )

    @staticmethod
    def _match_subject(ev: IngestEvent) -> str | None:
        probe = DispatchRequest(
            event_id="",
            event=ev.event,
            session_id="",
            tool_name=ev.tool_name,
            timestamp="",
            detail={"subagentId": ev.subagent_id} if ev.subagent_id else {},
        )
        return match_key(probe)

    @staticmethod
    def _detail(ev: IngestEvent, tool_input: Any, tool_response: Any) -> dict[str, Any]:
        detail = dict(ev.detail)
        own = {
            "toolInput": tool_input,
            "toolResponse": tool_response,
            "prompt": ev.prompt,
            "lastAssistantMessage": ev.last_assistant_message,
            "subagentId": ev.subagent_id,
        }
        detail.update({k: v for k, v in own.items() if v is not None})
        return detail
