"""The normalised lifecycle event vocabulary (SPEC §6.1), defined once: every runtime
adapter, read model, installer and the self-update settings file names its events from
here, as a selection of these.

A runtime's own events beyond these (Claude Code's PermissionRequest, Codex's Interrupt)
are stored under their own names and are observational.
"""

from __future__ import annotations

from typing import Final

SESSION_START: Final = "SessionStart"
USER_PROMPT_SUBMIT: Final = "UserPromptSubmit"
PRE_TOOL_USE: Final = "PreToolUse"
POST_TOOL_USE: Final = "PostToolUse"
POST_TOOL_USE_FAILURE: Final = "PostToolUseFailure"
SUBAGENT_START: Final = "SubagentStart"
SUBAGENT_STOP: Final = "SubagentStop"
STOP: Final = "Stop"
STOP_FAILURE: Final = "StopFailure"
PRE_COMPACT: Final = "PreCompact"
POST_COMPACT: Final = "PostCompact"
NOTIFICATION: Final = "Notification"
SESSION_END: Final = "SessionEnd"
# Tachograph's own, around a task attempt (observational).
TASK_START: Final = "TaskStart"
TASK_STOP: Final = "TaskStop"
# Not normalised, but named by several runtimes' installers: the permission dialog.
PERMISSION_REQUEST: Final = "PermissionRequest"

# What agent runtimes report, in a session's order.
NORMALISED_EVENTS: Final[tuple[str, ...]] = (
    SESSION_START,
    USER_PROMPT_SUBMIT,
    PRE_TOOL_USE,
    POST_TOOL_USE,
    POST_TOOL_USE_FAILURE,
    SUBAGENT_START,
    SUBAGENT_STOP,
    STOP,
    STOP_FAILURE,
    PRE_COMPACT,
    POST_COMPACT,
    NOTIFICATION,
    SESSION_END,
)

_PASS_ONLY: Final = frozenset({"pass"})
_GATE_OUTCOMES: Final = frozenset({"pass", "deny", "modify"})
_STOP_OUTCOMES: Final = frozenset({"pass", "continue"})
# A tool call may also wait for an operator's decision (an approval).
_TOOL_GATE_OUTCOMES: Final = _GATE_OUTCOMES | {"ask"}

# What a managed handler may answer on each event (§6.1).
EVENT_OUTCOMES: Final[dict[str, frozenset[str]]] = {
    SESSION_START: _PASS_ONLY,
    TASK_START: _PASS_ONLY,
    POST_TOOL_USE: _PASS_ONLY,
    POST_TOOL_USE_FAILURE: _PASS_ONLY,
    SUBAGENT_STOP: _PASS_ONLY,
    TASK_STOP: _PASS_ONLY,
    STOP_FAILURE: _PASS_ONLY,
    SESSION_END: _PASS_ONLY,
    PRE_COMPACT: _PASS_ONLY,
    POST_COMPACT: _PASS_ONLY,
    NOTIFICATION: _PASS_ONLY,
    USER_PROMPT_SUBMIT: _GATE_OUTCOMES,
    SUBAGENT_START: _GATE_OUTCOMES,
    PRE_TOOL_USE: _TOOL_GATE_OUTCOMES,
    STOP: _STOP_OUTCOMES,
}
# Events whose handlers only watch, and the gates: those that may change the agent's course.
OBSERVATIONAL_EVENTS: Final[frozenset[str]] = frozenset(
    event for event, outcomes in EVENT_OUTCOMES.items() if outcomes == _PASS_ONLY
)
GATE_EVENTS: Final[frozenset[str]] = frozenset(EVENT_OUTCOMES) - OBSERVATIONAL_EVENTS
TOOL_EVENTS: Final = frozenset({PRE_TOOL_USE, POST_TOOL_USE, POST_TOOL_USE_FAILURE})
SUBAGENT_EVENTS: Final = frozenset({SUBAGENT_START, SUBAGENT_STOP})
# A tool call's outcome: the events that carry its response.
RESPONSE_EVENTS: Final = frozenset({POST_TOOL_USE, POST_TOOL_USE_FAILURE})
# Events that carry a prompt (the user's, or the one a subagent starts with).
PROMPT_EVENTS: Final = frozenset({USER_PROMPT_SUBMIT, SUBAGENT_START})


def without(*left_out: str) -> tuple[str, ...]:
    """The normalised events but those a runtime does not report, in session order."""
    unknown = set(left_out) - set(NORMALISED_EVENTS)
    if unknown:
        raise ValueError(f"not normalised events: {sorted(unknown)}")
    return tuple(event for event in NORMALISED_EVENTS if event not in left_out)
