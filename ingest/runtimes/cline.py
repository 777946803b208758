"""Cline adapter (Cline CLI 3.0.65): hook payloads to lifecycle events, decisions to Cline's
hook answers (§6.5).

Cline runs every executable named after an event (`TaskStart`, `PreToolUse`, ... with no
extension or one of `.sh .py .js ...`) in `~/.cline/hooks/` and `<workspace>/.clinerules/
hooks/`, with the payload on stdin; the event is the file's name (the command hook's
argument), not in the payload, which names Cline's internal hook (`hookName`:
`agent_start`, `tool_call`, ...). As verified against the 3.0.65 binary:

- Events: TaskStart and TaskResume -> SessionStart (`source` startup/resume),
  UserPromptSubmit, PreToolUse, PostToolUse (PostToolUseFailure when the call failed),
  TaskComplete -> Stop, TaskError and TaskCancel -> StopFailure, PreCompact,
  SessionShutdown -> SessionEnd.
- The session is `sessionContext.rootSessionId`, the id Cline's session list and resume
  use: every agent of the run reports it, while `taskId` names one agent's conversation
  (a spawned agent has its own). A spawned agent's events carry its `agent_id` as the
  subagent.
- Tools are recorded under Claude Code's names and fields (cline_tools.py).
- Only the tool hooks are awaited (Cline waits 120 s for them, then runs the call as
  if no hook had answered). TaskStart, TaskResume, UserPromptSubmit, TaskComplete,
  TaskError, TaskCancel and SessionShutdown run detached, their answers unread.
- The answer is `{cancel, errorMessage, contextModification, overrideInput, review}`.
  `cancel: true` keeps the call from running but aborts the whole run, and the model
  never sees `errorMessage`: a deny is answered so (nothing closer exists), and the audit
  note says so. `overrideInput` (the tool's whole input) applies a rewrite;
  `contextModification` on PreToolUse and PostToolUse reaches the model, as a user
  message after the tool's result. Exit code 2 is ignored.

Stdlib only: the command-hook client imports it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from domain.hook_dispatch import Decision
from domain.lifecycle import LifecycleEvent
from domain.lifecycle_events import (
    POST_TOOL_USE,
    POST_TOOL_USE_FAILURE,
    PRE_COMPACT,
    PRE_TOOL_USE,
    SESSION_END,
    SESSION_START,
    STOP,
    STOP_FAILURE,
    TOOL_EVENTS,
    USER_PROMPT_SUBMIT,
)
from ingest.runtimes.claude_code import (
    DENY_REASON,
    HookPayloadError,
    known_outcome,
    optional_text,
    split_fields,
    tool_event_id,
)
from ingest.runtimes.cline_tools import native_input, recorded_tool

AGENT: Final = "cline"

# Cline's hook files (its event names) -> Tachograph's events.
EVENT_NAMES: Final[Mapping[str, str]] = {
    "TaskStart": SESSION_START,
    "TaskResume": SESSION_START,
    "UserPromptSubmit": USER_PROMPT_SUBMIT,
    "PreToolUse": PRE_TOOL_USE,
    "PostToolUse": POST_TOOL_USE,
    "TaskComplete": STOP,
    "TaskError": STOP_FAILURE,
    "TaskCancel": STOP_FAILURE,
    "PreCompact": PRE_COMPACT,
    "SessionShutdown": SESSION_END,
}
# Cline's internal hook names (the payload's `hookName`), for a hook not named by its file.
_HOOK_NAMES: Final[Mapping[str, str]] = {
    "agent_start": "TaskStart",
    "agent_resume": "TaskResume",
    "prompt_submit": "UserPromptSubmit",
    "tool_call": "PreToolUse",
    "tool_result": "PostToolUse",
    "agent_end": "TaskComplete",
    "agent_error": "TaskError",
    "agent_abort": "TaskCancel",
    "session_shutdown": "SessionShutdown",
}
# The hook files `hook install cline` writes, and the normalised events they produce.
INSTALLED_EVENTS: Final = tuple(EVENT_NAMES)
NORMALISED_EVENTS: Final = tuple(dict.fromkeys(EVENT_NAMES.values()))
# Cline reads an answer only from its tool hooks: PreToolUse is the one gate it has.
FAIL_CLOSED_EVENTS: Final = frozenset({PRE_TOOL_USE})
_CONTEXT_EVENTS: Final = frozenset({PRE_TOOL_USE, POST_TOOL_USE, POST_TOOL_USE_FAILURE})
# The payload's restatement of a tool call with every value JSON-encoded: not kept.
_RESTATED: Final = ("preToolUse", "postToolUse")


def cline_payload_to_event(payload: object, event: str | None = None) -> LifecycleEvent:
    """Map a Cline hook payload to a LifecycleEvent; never fails on field content.

    `event` (the hook file's name, the command hook's argument) wins over `hookName`.
    """
    if not isinstance(payload, dict):
        raise HookPayloadError("a Cline hook body must be a JSON object")
    hook_name = payload.get("hookName")
    name = event or (_HOOK_NAMES.get(hook_name) if isinstance(hook_name, str) else None)
    if not isinstance(name, str) or not name:
        raise HookPayloadError(
            "a Cline hook needs its event: register it as /hooks/cline/<Event> "
            "(or `tachograph hook cline <Event>`)"
        )
    body = {k: v for k, v in payload.items() if k not in _RESTATED}
    call = body.pop("tool_call", None) if name == "PreToolUse" else body.pop("tool_result", None)
    mapped, detail = split_fields(body, {})
    _session(payload, mapped)
    _cwd(payload, mapped)
    normalised = EVENT_NAMES.get(name, name)
    if isinstance(call, dict):
        normalised = _tool_call(call, payload, normalised, mapped, detail)
    elif call is not None:
        detail["toolCall"] = call
    _event_facts(name, payload, mapped, detail)
    parent, agent_id = payload.get("parent_agent_id"), payload.get("agent_id")
    if parent and isinstance(agent_id, str) and agent_id:
        mapped["subagent_id"] = agent_id  # a spawned agent's events (the root's have none)
    if name != normalised:
        detail["clineEvent"] = name
    event_id = tool_event_id(AGENT, normalised, mapped, TOOL_EVENTS)
    return LifecycleEvent(normalised, event_id=event_id, agent=AGENT, detail=detail, **mapped)


def _session(payload: Mapping[str, Any], mapped: dict[str, Any]) -> None:
    context = payload.get("sessionContext")
    root = context.get("rootSessionId") if isinstance(context, dict) else None
    if not (isinstance(root, str) and root):
        root = payload.get("taskId")
    if isinstance(root, str) and root:
        mapped["agent_session_id"] = root


def _cwd(payload: Mapping[str, Any], mapped: dict[str, Any]) -> None:
    info, roots = payload.get("workspaceInfo"), payload.get("workspaceRoots")
    root = info.get("rootPath") if isinstance(info, dict) else None
    if not isinstance(root, str) and isinstance(roots, list) and roots:
        root = roots[0]
    if isinstance(root, str) and root:
        mapped["cwd"] = root


def _tool_call(
    call: Mapping[str, Any],
    payload: Mapping[str, Any],
    event: str,
    mapped: dict[str, Any],
    detail: dict[str, Any],
) -> str:
    """Fill the tool fields from `tool_call` / `tool_result`; the event (a failed call's
    result is PostToolUseFailure)."""
    name, native = call.get("name"), call.get("input")
    if isinstance(call.get("id"), str) and call["id"]:
        mapped["tool_call_id"] = call["id"]
    if isinstance(name, str) and name:
        tool, tool_input = recorded_tool(name, native)
        mapped["tool_name"] = tool
        if tool != name:
            detail["nativeToolName"] = name
        if tool_input is not native:
            detail["nativeToolInput"] = native
        if isinstance(tool_input, dict):
            mapped["tool_input"] = tool_input
        elif tool_input is not None:
            detail["toolInput"] = tool_input
    if event != POST_TOOL_USE:
        return event
    if "output" in call:
        mapped["tool_response"] = call["output"]
    duration = call.get("durationMs")
    if type(duration) is int and duration >= 0:
        mapped["duration_ms"] = duration
    restated = payload.get("postToolUse")
    failed = bool(call.get("error")) or (
        isinstance(restated, dict) and restated.get("success") is False
    )
    if not failed:
        return event
    error = call.get("error")
    mapped["error"] = error if isinstance(error, str) and error else "the tool call failed"
    return POST_TOOL_USE_FAILURE


def _event_facts(
    name: str, payload: Mapping[str, Any], mapped: dict[str, Any], detail: dict[str, Any]
) -> None:
    """The prompt, the final text, the error or the reason of the events that carry one."""
    if name in ("TaskStart", "TaskResume"):
        detail["source"] = "resume" if name == "TaskResume" else "startup"
    prompt = payload.get("userPromptSubmit")
    if isinstance(prompt, dict) and isinstance(prompt.get("prompt"), str):
        mapped["prompt"] = prompt["prompt"]
    turn = payload.get("turn")
    if isinstance(turn, dict) and isinstance(turn.get("outputText"), str):
        mapped["last_assistant_message"] = turn["outputText"]
    error = payload.get("error")
    if isinstance(error, dict) and isinstance(error.get("message"), str):
        mapped["error"] = error["message"]
        detail.pop("error", None)
    if name == "TaskCancel":
        reason = payload.get("reason")
        mapped["error"] = reason if isinstance(reason, str) and reason else "cancelled"
        mapped["is_interrupt"] = True


def takes_learned(ev: LifecycleEvent) -> bool:
    """Whether Cline is told its agent's learned content with this event: Cline reads no
    answer at session start or with a prompt (those hooks run detached), so it is told
    with the results of a run's first model iteration, where it reads context."""
    return (
        ev.agent == AGENT
        and ev.event in (POST_TOOL_USE, POST_TOOL_USE_FAILURE)
        and ev.detail.get("iteration") == 1
    )


def decision_to_cline(event: str, decision: Decision) -> tuple[dict[str, Any], str | None]:
    """Cline's hook answer, plus an audit note saying what Cline was actually answered
    when that is not the decision."""
    notes: list[str] = []
    outcome = known_outcome(decision, notes)
    reason = optional_text(decision.reason)
    answer: dict[str, Any] = {}
    if event == PRE_TOOL_USE and outcome == "modify" and isinstance(decision.replacement, dict):
        answer = {"cancel": False, "overrideInput": native_input(decision.replacement)}
    elif event == PRE_TOOL_USE and outcome != "pass":
        if outcome != "deny":
            notes.append(f"PreToolUse {outcome} is not expressible in Cline; answered as deny")
        answer = {"cancel": True, "errorMessage": reason or DENY_REASON}
        notes.append(
            "Cline cannot refuse one call: answered cancel=true, which keeps the call from "
            "running and aborts the whole run; the model does not see the reason"
        )
    elif outcome != "pass":
        notes.append(f"{event} {outcome} is not applied by Cline (it does not read this answer)")
    _add_context(event, answer, optional_text(decision.additional_context), notes)
    return answer, "; ".join(notes) or None


def _add_context(event: str, answer: dict[str, Any], context: str | None, notes: list[str]) -> None:
    if not context:
        return
    if event in _CONTEXT_EVENTS and not answer.get("cancel"):
        answer["contextModification"] = context
    else:
        notes.append(f"additionalContext dropped: Cline does not read it on {event}")
