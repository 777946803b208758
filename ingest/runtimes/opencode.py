"""OpenCode adapter (OpenCode 1.18.33, and Kilo Code CLI 7.7.9, its fork): plugin hooks
to lifecycle events, decisions to the answers Tachograph's plugin applies (§6.5).

OpenCode has no command or HTTP hooks: it runs JavaScript plugins in its own process.
`tachograph hook install opencode|kilo` writes one (cli/opencode_plugin.py) that posts
each hook it handles to `/hooks/opencode` (`/hooks/kilo`) as
`{"hook": <name>, "input": <the hook's input>, "output": <its output>}` and applies the
answer itself. What it posts, as verified against both binaries:

| OpenCode hook                                 | Tachograph                            |
|-----------------------------------------------|---------------------------------------|
| `event` session.created                       | SessionStart                          |
| `chat.message` (the user's message)           | UserPromptSubmit                      |
| `tool.execute.before`                         | PreToolUse                            |
| `tool.execute.after`                          | PostToolUse                           |
| `experimental.session.compacting`             | PreCompact                            |
| `event` session.compacted                     | PostCompact                           |
| `event` session.idle (the turn is over)       | Stop (last_assistant_message: note 1) |
| `event` session.error                         | StopFailure                           |
| `event` session.deleted                       | SessionEnd                            |

(1) `lastAssistantMessage`, which the plugin adds: the last text the model wrote.

Tools are recorded under Claude Code's names (`bash` -> `Bash`, `write` -> `Write`, ...)
with Claude Code's input fields (`filePath` -> `file_path`, `oldString` -> `old_string`,
...), so policy rules, approvals and activity search treat a call alike whoever ran it;
the native name stays in `detail.nativeToolName`, and a rewrite is sent back in
OpenCode's own fields. The model's `callID` is the call's id.

Answers (what the plugin does with them):
- `{"deny": reason}` on PreToolUse: the plugin throws; OpenCode does not run the tool and
  the model reads the message as the tool's result. On UserPromptSubmit the throw
  rejects the prompt (the run ends with that error).
- `{"args": {...}}` on PreToolUse: the tool's arguments are replaced (the complete input).
- `{"context": text}`: appended to the tool's output on PostToolUse; on every other event
  added to the session's system prompt from its next model call on.
- Stop is a notification in OpenCode (session.idle): a `continue` cannot be expressed.

Stdlib only: the installer and the command-hook client's runtime table import it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Final

from domain.hook_dispatch import Decision
from domain.lifecycle import LifecycleEvent
from domain.lifecycle_events import (
    POST_COMPACT,
    POST_TOOL_USE,
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
    tool_event_id,
)

AGENT: Final = "opencode"
KILO_AGENT: Final = "kilo"

# The plugin hooks Tachograph's plugin posts, and the bus events it posts from `event`.
HOOK_EVENTS: Final[Mapping[str, str]] = {
    "chat.message": USER_PROMPT_SUBMIT,
    "tool.execute.before": PRE_TOOL_USE,
    "tool.execute.after": POST_TOOL_USE,
    "experimental.session.compacting": PRE_COMPACT,
}
BUS_EVENTS: Final[Mapping[str, str]] = {
    "session.created": SESSION_START,
    "session.idle": STOP,
    "session.error": STOP_FAILURE,
    "session.compacted": POST_COMPACT,
    "session.deleted": SESSION_END,
}
NORMALISED_EVENTS: Final = (
    SESSION_START,
    USER_PROMPT_SUBMIT,
    PRE_TOOL_USE,
    POST_TOOL_USE,
    STOP,
    STOP_FAILURE,
    PRE_COMPACT,
    POST_COMPACT,
    SESSION_END,
)
# What the plugin denies when installed `--fail-closed` and Tachograph cannot be reached:
# the two hooks OpenCode awaits and lets a plugin refuse.
FAIL_CLOSED_EVENTS: Final = frozenset({USER_PROMPT_SUBMIT, PRE_TOOL_USE})

# OpenCode's tool -> Claude Code's name for the same tool.
TOOL_NAMES: Final[Mapping[str, str]] = {
    "bash": "Bash",
    "write": "Write",
    "edit": "Edit",
    "multiedit": "MultiEdit",
    "read": "Read",
    "glob": "Glob",
    "grep": "Grep",
    "list": "LS",
    "webfetch": "WebFetch",
    "websearch": "WebSearch",
    "todowrite": "TodoWrite",
    "todoread": "TodoRead",
    "task": "Task",
}
# OpenCode's input fields -> Claude Code's (the others are named alike).
INPUT_FIELDS: Final[Mapping[str, str]] = {
    "filePath": "file_path",
    "oldString": "old_string",
    "newString": "new_string",
    "replaceAll": "replace_all",
}
_NATIVE_FIELDS: Final = {v: k for k, v in INPUT_FIELDS.items()}


def opencode_payload_to_event(
    payload: object, event: str | None = None, *, agent: str = AGENT
) -> LifecycleEvent | None:
    """Map a hook the plugin posted to a LifecycleEvent; None for one not recorded.

    `event` (a route naming the hook) wins over the body's `hook`. Never fails on field
    content.
    """
    if not isinstance(payload, dict):
        raise HookPayloadError("an OpenCode plugin hook body must be a JSON object")
    hook = event or payload.get("hook")
    if not isinstance(hook, str) or not hook:
        raise HookPayloadError("an OpenCode plugin hook body needs a non-empty hook")
    given, produced = _object(payload.get("input")), _object(payload.get("output"))
    if hook == "event":
        return _bus_event(given, payload, agent)
    name = HOOK_EVENTS.get(hook)
    if name is None:
        return None
    fields: dict[str, Any] = {"agent_session_id": _text(given.get("sessionID"))}
    detail: dict[str, Any] = {"hook": hook}
    if name == USER_PROMPT_SUBMIT:
        message = _object(produced.get("message"))
        fields.update(prompt=_prompt(produced.get("parts")), turn_id=_text(message.get("id")))
        fields["model"] = _model(message.get("model")) or _model(given.get("model"))
        if isinstance(message.get("agent"), str):
            detail["opencodeAgent"] = message["agent"]
    elif name in TOOL_EVENTS:
        native = _text(given.get("tool"))
        args = produced.get("args") if name == PRE_TOOL_USE else given.get("args")
        fields.update(
            tool_name=TOOL_NAMES.get(native or "", native),
            tool_call_id=_text(given.get("callID")),
            tool_input=claude_input(args) if isinstance(args, dict) else None,
        )
        if native in TOOL_NAMES:
            detail["nativeToolName"] = native
        if name == POST_TOOL_USE:
            fields["tool_response"] = produced or None
    mapped = {k: v for k, v in fields.items() if v is not None}
    event_id = tool_event_id(agent, name, mapped, TOOL_EVENTS)
    return LifecycleEvent(name, event_id=event_id, agent=agent, detail=detail, **mapped)


def _bus_event(
    bus: dict[str, Any], payload: Mapping[str, Any], agent: str
) -> LifecycleEvent | None:
    """A session event from the bus (`{type, properties}`), if it is one recorded."""
    kind = bus.get("type")
    name = BUS_EVENTS.get(kind) if isinstance(kind, str) else None
    if name is None:
        return None
    properties = _object(bus.get("properties"))
    info = _object(properties.get("info"))
    session = _text(properties.get("sessionID")) or _text(info.get("id"))
    detail: dict[str, Any] = {"hook": f"event.{kind}"}
    for key in ("title", "parentID", "version", "slug"):
        if isinstance(info.get(key), str):
            detail[key] = info[key]
    fields: dict[str, Any] = {"agent_session_id": session, "cwd": _text(info.get("directory"))}
    if name == STOP:
        fields["last_assistant_message"] = _text(payload.get("lastAssistantMessage"))
    if name == STOP_FAILURE:
        fields["error"] = _error(properties.get("error"))
    mapped = {k: v for k, v in fields.items() if v is not None}
    return LifecycleEvent(name, agent=agent, detail=detail, **mapped)


def claude_input(args: Mapping[str, Any]) -> dict[str, Any]:
    """A tool's arguments in Claude Code's field names."""
    return {INPUT_FIELDS.get(k, k): v for k, v in args.items()}


def native_input(args: Mapping[str, Any]) -> dict[str, Any]:
    """Arguments in Claude Code's field names back in OpenCode's."""
    return {_NATIVE_FIELDS.get(k, k): v for k, v in args.items()}


def _object(value: object) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _text(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def _prompt(parts: object) -> str | None:
    """The user's own text: the message's text parts, without those OpenCode adds."""
    texts = [
        p["text"]
        for p in (parts if isinstance(parts, list) else [])
        if isinstance(p, dict)
        and p.get("type") == "text"
        and isinstance(p.get("text"), str)
        and not p.get("synthetic")
    ]
    return "\n".join(texts) or None


def _model(model: object) -> str | None:
    """`provider/model` of a message's `{providerID, modelID}` (or a model's `{providerID, id}`)."""
    if not isinstance(model, dict):
        return None
    provider, name = model.get("providerID"), model.get("modelID") or model.get("id")
    if isinstance(provider, str) and isinstance(name, str):
        return f"{provider}/{name}"
    return None


def _error(error: object) -> str:
    """A session error's message (`{name, data: {message}}`), else its name."""
    if isinstance(error, dict):
        data = _object(error.get("data"))
        for value in (data.get("message"), error.get("message"), error.get("name")):
            if isinstance(value, str) and value:
                return value
    return "session error"


def decision_to_opencode(event: str, decision: Decision) -> tuple[dict[str, Any], str | None]:
    """The plugin's answer to a combined decision, plus an audit note when degraded."""
    notes: list[str] = []
    outcome = known_outcome(decision, notes)
    reason = optional_text(decision.reason)
    context = optional_text(decision.additional_context)
    answer: dict[str, Any] = {}
    if outcome == "pass":
        pass
    elif event == PRE_TOOL_USE and outcome == "modify" and isinstance(decision.replacement, dict):
        answer = {"args": native_input(decision.replacement)}
    elif event in FAIL_CLOSED_EVENTS:
        answer = {"deny": _deny_reason(event, outcome, reason, decision.replacement, notes)}
    else:
        notes.append(f"{event} has no decision control in OpenCode; {outcome} answered as pass")
    if context and "deny" in answer:
        answer["deny"] = f"{answer['deny']}\n\n{context}"  # the model reads the reason
    elif context:
        answer["context"] = context
    return answer, "; ".join(notes) or None


def _deny_reason(
    event: str, outcome: str, reason: str | None, replacement: object, notes: list[str]
) -> str:
    """What a refused prompt or tool call says, for a deny and what OpenCode cannot apply."""
    if outcome == "modify":
        what = "prompt" if event == USER_PROMPT_SUBMIT else "input"
        notes.append(
            f"{event} modify is not applied by OpenCode here; answered deny with the "
            "replacement in the reason"
        )
        text = replacement if isinstance(replacement, str) else json.dumps(replacement)
        lead = f"{reason}\n\n" if reason else ""
        return (
            f"{lead}Tachograph policy rewrote this {what}, which OpenCode cannot apply here, "
            f"so it was blocked. Replacement {what}:\n{text}"
        )
    if outcome == "continue":
        notes.append(f"{event} continue is not an outcome of this event; answered deny")
    return reason or DENY_REASON
