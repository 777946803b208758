"""Pure hook dispatch rules (spec §6.2): who is asked what, and how answers combine.

No I/O here: `decide` says which handler to ask next, and folds the replies the
caller got (ingest/dispatch.py sends them) into one Decision.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Final, Literal

from domain.hook_config import SUBAGENT_EVENTS, TOOL_EVENTS, HookHandler

if TYPE_CHECKING:
    from domain.policy.verdict import PolicyHit, PolicyVerdict

# `ask` holds a tool call for an operator (domain/approval.py); it is never what the agent
# is finally told: the approval settles it to pass (or modify) or deny.
Outcome = Literal["pass", "deny", "modify", "continue", "ask"]

# Failure classes recorded on handler runs.
FAILURE_TIMEOUT = "timeout"
FAILURE_TRANSPORT = "transport"
FAILURE_CONFIGURATION = "configuration"
FAILURE_OVER_CAP = "over_cap"
FAILURE_STATUS = "status"
FAILURE_MALFORMED = "malformed"
FAILURE_DISALLOWED_OUTCOME = "disallowed_outcome"
FAILURE_REQUEST = "request"

RESPONSE_BODY_CAP = 64 * 1024
REASON_CAP = 2 * 1024
CONTEXT_CAP = 16 * 1024
STOP_CONTINUE_LIMIT = 3
CONTEXT_SEPARATOR = "\n\n"

REDACTED = "[redacted]"
DEFAULT_REDACTED_TOOLS: frozenset[str] = frozenset({"storeSecret", "recallSecret", "updateSecret"})

OUTCOMES: frozenset[str] = frozenset({"pass", "deny", "modify", "continue", "ask"})


@dataclass(frozen=True, kw_only=True)
class HandlerRequest:
    """What a managed handler is asked about one event (the transport renders §6.2's body).

    Tool input and response are already redacted; `detail` is the runtime's extra fields.
    """

    event_id: str
    event: str
    session_id: str
    turn_id: str | None = None
    tool_call_id: str | None = None
    tool_name: str | None = None
    agent: str | None = None
    model: str | None = None
    timestamp: str
    tool_input: Any = None
    tool_response: Any = None
    prompt: str | None = None
    last_assistant_message: str | None = None
    subagent_id: str | None = None
    cwd: str | None = None
    permission_mode: str | None = None
    agent_type: str | None = None
    duration_ms: int | None = None
    error: str | None = None
    is_interrupt: bool | None = None
    detail: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class HandlerDecision:
    """A valid handler answer."""

    outcome: Outcome
    reason: str | None
    additional_context: str | None
    replacement: Any | None


@dataclass(frozen=True)
class HandlerFailure:
    """An unusable handler answer: failure class plus an explanation (may be empty)."""

    failure: str
    message: str


@dataclass(frozen=True)
class HandlerReply:
    """A handler's parsed answer to one request, and how long it took."""

    answer: HandlerDecision | HandlerFailure
    duration_ms: int


@dataclass(frozen=True)
class HandlerRun:
    """Audit record of one handler run (no raw payloads)."""

    handler_id: str
    outcome: Outcome
    failure: str | None
    reason: str | None
    duration_ms: int
    # True when a Stop `continue` was downgraded to pass by the per-turn limit.
    continue_capped: bool = False
    # On an approval's run: the request it settled and who settled it (domain/approval.py
    # `approval_record`), so the record names the operator without parsing `reason`.
    approval: dict[str, Any] | None = None

    def record(self) -> dict[str, Any]:
        """As stored in HookDispatch.Created's `runs` (`approval` only where there is one)."""
        stored: dict[str, Any] = {
            "handler_id": self.handler_id,
            "outcome": self.outcome,
            "failure": self.failure,
            "reason": self.reason,
            "duration_ms": self.duration_ms,
            "continue_capped": self.continue_capped,
        }
        if self.approval is not None:
            stored["approval"] = self.approval
        return stored


@dataclass(frozen=True)
class Decision:
    """The combined decision on one event: what the agent is told, and every run behind it."""

    outcome: Outcome
    reason: str | None = None
    additional_context: str | None = None
    replacement: Any | None = None
    runs: tuple[HandlerRun, ...] = ()
    # An operator allowed this call (an approval): a permission dialog is answered
    # "allow" rather than left to the runtime's own prompt.
    approved: bool = False
    # The policy rule that decided the call, or would have in shadow mode (recorded).
    policy: PolicyHit | None = None


PASS: Final = Decision("pass")

# A code-owned tool policy: (rule, reason) when it refuses a tool call, else None. It is
# given the tool, its input and the runtime's working directory (absolute, or None).
ToolPolicy = Callable[[str | None, Any, str | None], tuple[str, str] | None]
POLICY_HANDLER: Final = "tachograph-policy"


@dataclass(frozen=True)
class Dispatch:
    """What one dispatch decides on, besides the handlers and their replies."""

    request: HandlerRequest
    # Judged before any handler, and again on a handler's rewrite (PreToolUse only).
    policy: ToolPolicy | None = None
    # The unredacted input the policy judges, and the runtime's working directory.
    policy_input: Any = None
    cwd: str | None = None
    # Stop `continue`s already honoured in this turn (the per-turn cap, §6.2).
    stop_continues_so_far: int = 0
    # What the operator's policy rules say of the call (docs/policy.md), judged before.
    verdict: PolicyVerdict | None = None


@dataclass(frozen=True)
class HandlerCall:
    """The next handler to ask, and what to ask it; its reply goes back into `decide`."""

    handler: HookHandler
    request: HandlerRequest


def decide(
    dispatch: Dispatch, handlers: Sequence[HookHandler], replies: Sequence[HandlerReply]
) -> HandlerCall | Decision:
    """The decision once `replies` answer enough of `handlers`; else the next call to make.

    Pure: the caller sends each HandlerCall, appends the reply and decides again. The
    chain runs the handlers in order and combines their answers per §6.2; a code-owned
    policy comes first, so no handler is asked about a call it refuses.
    """
    policy = dispatch.policy if dispatch.request.event == "PreToolUse" else None
    if policy is not None:
        refused = policy(dispatch.request.tool_name, dispatch.policy_input, dispatch.cwd)
        if refused is not None:
            return policy_denial(refused, ())
    verdict = dispatch.verdict
    ruled = verdict.enforced if verdict is not None else None
    if ruled is not None and ruled.outcome == "deny":
        return Decision("deny", ruled.denial_reason(), policy=ruled)
    chain = _Chain(dispatch.request, dispatch.stop_continues_so_far)
    if ruled is not None and ruled.outcome == "context" and ruled.context:
        chain.add_context(ruled.context)
    result: Decision | None = None
    for index, handler in enumerate(handlers):
        if index == len(replies):
            return HandlerCall(handler, chain.request)
        result = chain.step(handler, replies[index])
        if result is not None:
            break
    if result is None:
        result = chain.finish()
    if policy is not None and result.outcome == "modify":
        # ... and again on what a handler rewrote the call to.
        rewritten = policy(dispatch.request.tool_name, result.replacement, dispatch.cwd)
        if rewritten is not None:
            return policy_denial(rewritten, result.runs)
    return _ruled(result, verdict)


def _ruled(result: Decision, verdict: PolicyVerdict | None) -> Decision:
    """The handlers' result under the policy's verdict: an `ask` rule holds a call the
    handlers let through (their deny stands without troubling a person), and the rule
    that decided, or would have in shadow mode, is recorded."""
    if verdict is None:
        return result
    ruled = verdict.enforced
    if ruled is not None and ruled.outcome == "ask" and result.outcome in ("pass", "modify"):
        return replace(result, outcome="ask", reason=ruled.ask_reason(), policy=ruled)
    return replace(result, policy=verdict.recorded)


def policy_denial(refused: tuple[str, str], runs: tuple[HandlerRun, ...]) -> Decision:
    """A deny by the fixed policy, recorded as a run naming the rule that fired."""
    rule, reason = refused
    run = HandlerRun(f"{POLICY_HANDLER}:{rule}", "deny", None, reason, 0)
    return Decision("deny", reason, None, None, (*runs, run))


def redact_tool_input(
    tool_name: str | None, tool_input: Any, redacted_tools: frozenset[str]
) -> Any:
    """Replace the input of a listed tool by the string "[redacted]"."""
    if tool_name is not None and tool_name in redacted_tools:
        return REDACTED
    return tool_input


def match_key(event: str, tool_name: str | None, subagent_id: object) -> str | None:
    """The subject matchers select on: tool name for tool events, subagent id for subagents."""
    if event in TOOL_EVENTS:
        return tool_name
    if event in SUBAGENT_EVENTS:
        return subagent_id if isinstance(subagent_id, str) else None
    return None


def _failure_reason(handler: HookHandler, failure: str) -> str:
    """Decision reason for a failed handler; names the handler, never echoes its payload."""
    mode = "failing closed" if handler.failure_mode == "closed" else "failing open"
    return f"hook {json.dumps(handler.id)} failed ({failure}); {mode}"


class _Chain:
    """State while one handler chain is folded."""

    def __init__(self, request: HandlerRequest, stop_continues_so_far: int) -> None:
        self.request = request
        self.continue_allowed = stop_continues_so_far < STOP_CONTINUE_LIMIT
        self.contexts: list[str] = []
        self.context_bytes = 0
        self.runs: list[HandlerRun] = []
        self.modified = False
        self.replacement: Any | None = None
        self.modify_reason: str | None = None

    def step(self, handler: HookHandler, reply: HandlerReply) -> Decision | None:
        """Fold one handler's reply; return a final result when the chain stops here."""
        answer = reply.answer
        if isinstance(answer, HandlerDecision):
            answer = self._admit_context(answer)
        if isinstance(answer, HandlerFailure):
            return self._fail(handler, answer, reply.duration_ms)
        return self._apply(handler, answer, reply.duration_ms)

    def add_context(self, context: str) -> None:
        """A policy rule's context, first in the combination (it fits the cap: checked
        when the rule was recorded)."""
        self.contexts.append(context)
        self.context_bytes += len(context.encode("utf-8"))

    def _admit_context(self, decision: HandlerDecision) -> HandlerDecision | HandlerFailure:
        """Add the decision's context unless it pushes the combination over the cap."""
        context = decision.additional_context
        if not context:
            return decision
        size = len(context.encode("utf-8"))
        if self.contexts:
            size += len(CONTEXT_SEPARATOR)
        if self.context_bytes + size > CONTEXT_CAP:
            return HandlerFailure(
                FAILURE_OVER_CAP, f"combined additionalContext would exceed {CONTEXT_CAP} bytes"
            )
        self.contexts.append(context)
        self.context_bytes += size
        return decision

    def _fail(
        self, handler: HookHandler, failure: HandlerFailure, duration_ms: int
    ) -> Decision | None:
        """Apply the handler's failure mode: closed denies and stops, open counts as pass."""
        closed = handler.failure_mode == "closed"
        reason = _failure_reason(handler, failure.failure)
        detailed = f"{reason}: {failure.message}" if failure.message else reason
        self._record(handler, "deny" if closed else "pass", failure.failure, detailed, duration_ms)
        return self._result("deny", reason) if closed else None

    def _apply(
        self, handler: HookHandler, decision: HandlerDecision, duration_ms: int
    ) -> Decision | None:
        """Fold a valid decision into the chain."""
        outcome = decision.outcome
        if outcome == "deny":
            self._record(handler, "deny", None, decision.reason, duration_ms)
            default = f"denied by hook {json.dumps(handler.id)}"
            return self._result("deny", decision.reason or default)
        if outcome == "continue":
            return self._continue(handler, decision, duration_ms)
        if outcome == "ask":
            # A person decides: later handlers are not asked about a call that may not run.
            self._record(handler, "ask", None, decision.reason, duration_ms)
            return self._result("ask", decision.reason or f"hook {json.dumps(handler.id)} asks")
        if outcome == "modify":
            self._modify(decision)
        self._record(handler, outcome, None, decision.reason, duration_ms)
        return None

    def _continue(
        self, handler: HookHandler, decision: HandlerDecision, duration_ms: int
    ) -> Decision | None:
        """Honour Stop `continue` while under the per-turn limit; afterwards it is a pass."""
        if not self.continue_allowed:
            self._record(handler, "pass", None, decision.reason, duration_ms, continue_capped=True)
            return None
        self._record(handler, "continue", None, decision.reason, duration_ms)
        # Like deny, continue is the gate's decisive answer: the turn will not stop.
        return self._result("continue", decision.reason)

    def _modify(self, decision: HandlerDecision) -> None:
        """Make the replacement the next handler's input and the chain's pending result."""
        self.modified = True
        self.replacement = decision.replacement
        self.modify_reason = decision.reason
        if self.request.event == "PreToolUse":
            # A redacted tool stays redacted for later handlers, whatever replaced its input.
            if self.request.tool_input != REDACTED:
                self.request = replace(self.request, tool_input=decision.replacement)
        else:
            self.request = replace(self.request, prompt=decision.replacement)

    def _record(
        self,
        handler: HookHandler,
        outcome: Outcome,
        failure: str | None,
        reason: str | None,
        duration_ms: int,
        *,
        continue_capped: bool = False,
    ) -> None:
        """Append the audit record of one run."""
        self.runs.append(
            HandlerRun(handler.id, outcome, failure, reason, duration_ms, continue_capped)
        )

    def _result(self, outcome: Outcome, reason: str | None) -> Decision:
        """A final result; modify replacements only survive when the outcome is modify."""
        return Decision(
            outcome=outcome,
            reason=reason,
            additional_context=CONTEXT_SEPARATOR.join(self.contexts) or None,
            # An `ask` keeps an earlier rewrite: what is allowed is the rewritten call.
            replacement=self.replacement if outcome in ("modify", "ask") else None,
            runs=tuple(self.runs),
        )

    def finish(self) -> Decision:
        """Result after every handler ran without stopping the chain."""
        if self.modified:
            return self._result("modify", self.modify_reason)
        return self._result("pass", None)
