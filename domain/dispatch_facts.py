"""What an agent actually did, as recorded with each dispatch: bounded, redacted facts.

The log keeps the call itself (the command that was denied, the file that was written,
whether the tool failed and how long it took) but never a transcript or an unbounded
blob: a tool input or prompt keeps at most 8 KiB, a tool response only its size, its
SHA-256 and a 2 KiB head, and one event's facts at most 32 KiB. Sizes count UTF-8 bytes
of the text (of a structured input, its compact JSON). Secrets are redacted before
anything is cut, so a cut cannot leave half a key readable, and the input of a tool in
TACHOGRAPH_REDACTED_TOOLS is never kept at all.

Pure: the ingest service calls `dispatch_facts` with the event and its decision.
"""

from __future__ import annotations

import functools
import hashlib
import json
from typing import Any, Final

from domain.hook_dispatch import Decision
from domain.lifecycle import LifecycleEvent
from domain.lifecycle_events import PROMPT_EVENTS, RESPONSE_EVENTS
from domain.redaction import (
    MARGIN_BYTES,
    REDACTED,
    might_hold_secret,
    redact_json,
    redact_secrets,
)

RECORD_FULL: Final = "full"
RECORD_METADATA: Final = "metadata"
RECORD_MODES: Final = (RECORD_FULL, RECORD_METADATA)

INPUT_LIMIT: Final = 8 * 1024
HEAD_LIMIT: Final = 2 * 1024
SUMMARY_LIMIT: Final = 1024
LABEL_LIMIT: Final = 256
PATH_LIMIT: Final = 1024
EVENT_LIMIT: Final = 32 * 1024

_MESSAGE_EVENTS: Final = frozenset({"Stop", "SubagentStop"})

# The input field that says what a call does, per tool (Claude Code's names; Coder and
# the generic route use the same tool names for the same tools).
_SUMMARY_KEYS: Final[dict[str, tuple[str, ...]]] = {
    "Bash": ("command",),
    "Write": ("file_path",),
    # Copilot CLI's PascalCase registration sends its file changes as `Edit`, recorded
    # as {patch, file_paths} like apply_patch.
    "Edit": ("file_path", "file_paths"),
    "MultiEdit": ("file_path",),
    "Read": ("file_path",),
    "NotebookEdit": ("notebook_path",),
    "WebFetch": ("url",),
    "WebSearch": ("query",),
    "Glob": ("pattern",),
    "Grep": ("pattern",),
    "Task": ("description",),
    "Agent": ("description",),
    # Codex's and Copilot's file-change tool, recorded as {patch, file_paths}.
    "apply_patch": ("file_paths", "patch"),
}
_GENERIC_SUMMARY_KEYS: Final = (
    "command",
    "cmd",
    "file_path",
    "path",
    "url",
    "query",
    "pattern",
)


def cut_utf8(text: str, limit: int) -> tuple[str, bool]:
    """At most `limit` bytes of UTF-8, never splitting a character; and whether it was cut."""
    if len(text) * 4 <= limit:
        return text, False
    raw = text.encode()
    if len(raw) <= limit:
        return text, False
    return raw[:limit].decode(errors="ignore"), True


def redact_text(text: str, limit: int) -> tuple[str, bool]:
    """The text redacted, then cut to `limit` bytes."""
    pre, _ = cut_utf8(text, limit + MARGIN_BYTES)
    return cut_utf8(redact_secrets(pre), limit)


def redact_value(value: Any, limit: int = INPUT_LIMIT) -> Any:
    """A JSON value redacted (`redact_json`), each string first cut to `limit` plus the
    redaction margin: nothing longer can be stored, and redaction then costs no more
    than the stored text."""
    return redact_json(value, lambda text: cut_utf8(text, limit + MARGIN_BYTES)[0])


# One encoder for every call: `json.dumps` with options builds a new one each time.
_COMPACT = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), default=str)


def compact_json(value: Any) -> str:
    return _COMPACT.encode(value)


def redacted_input(value: Any) -> tuple[Any, str]:
    """A structured input redacted (`redact_value`), and its compact JSON.

    Most inputs hold no secret: when the JSON of the whole input is within the input
    limit (so no string in it would be cut) and neither a secret-looking string nor a
    secret-named member can be in it, the input is its own redaction and is not walked.
    """
    text = compact_json(value)
    # Of a secret member's name, only `cookie` holds no word the screen looks for.
    if len(text) <= INPUT_LIMIT and not might_hold_secret(text) and "cookie" not in text.lower():
        return value, text
    redacted = redact_value(value)
    return redacted, compact_json(redacted)


def input_summary(tool_name: str | None, tool_input: Any) -> str | None:
    """The part of a (redacted) tool input that says what the call does."""
    if isinstance(tool_input, str):
        return cut_utf8(tool_input, SUMMARY_LIMIT)[0] or None
    if not isinstance(tool_input, dict):
        return None
    if tool_name and tool_name.startswith("mcp__"):
        server, _, tool = tool_name[len("mcp__") :].partition("__")
        return f"{server} {tool}".strip() or None
    for key in _SUMMARY_KEYS.get(tool_name or "", _GENERIC_SUMMARY_KEYS):
        value = tool_input.get(key)
        if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
            value = " ".join(value)  # the files a patch changes
        if isinstance(value, str) and value:
            return cut_utf8(value, SUMMARY_LIMIT)[0]
    return None


@functools.lru_cache(maxsize=1024)
def _redacted_label(text: str, limit: int) -> tuple[str, bool]:
    """A value a session repeats on each event (its cwd, model, permission mode): redacted
    once."""
    return redact_text(text, limit)


class _Facts:
    """Collects bounded fields and the names of those that were cut."""

    def __init__(self) -> None:
        self.fields: dict[str, Any] = {}
        self.truncated: list[str] = []
        self.size = 0

    def text(self, name: str, value: str | None, limit: int, *, redact: bool = True) -> None:
        if value is None:
            return
        text, cut = redact_text(value, limit) if redact else cut_utf8(value, limit)
        self._put(name, text, len(text.encode()), cut)

    def label(self, name: str, value: str | None, limit: int) -> None:
        if value is not None:
            text, cut = _redacted_label(value, limit)
            self._put(name, text, len(text.encode()), cut)

    def value(self, name: str, value: Any, text: str) -> None:
        """A structured (already redacted) input, `text` its compact JSON: kept as is, or
        as cut JSON text."""
        size = len(text.encode())
        if size <= INPUT_LIMIT:
            self._put(name, value, size, False)
        else:
            cut, _ = cut_utf8(text, INPUT_LIMIT)
            self._put(name, cut, len(cut.encode()), True)

    def sized(self, name: str, value: Any, size: int, cut: bool) -> None:
        self._put(name, value, size, cut)

    def plain(self, name: str, value: Any) -> None:
        if value is not None:
            self.fields[name] = value

    def _put(self, name: str, value: Any, size: int, cut: bool) -> None:
        if self.size + size > EVENT_LIMIT:
            self.truncated.append(name)
            return
        self.fields[name] = value
        self.size += size
        if cut:
            self.truncated.append(name)

    def result(self) -> dict[str, Any]:
        if self.truncated:
            self.fields["truncated"] = self.truncated
        return self.fields


def dispatch_facts(
    ev: LifecycleEvent, decision: Decision, redacted_tools: frozenset[str]
) -> dict[str, Any]:
    """The bounded, redacted facts of one event and its decision (stored snake_case)."""
    facts = _Facts()
    secret_tool = ev.tool_name is not None and ev.tool_name in redacted_tools
    if ev.tool_input is not None:
        _tool_input(facts, ev, decision, secret_tool)
    if ev.event in RESPONSE_EVENTS:
        _response(facts, ev, secret_tool)
    facts.plain("duration_ms", ev.duration_ms)
    facts.plain("is_interrupt", ev.is_interrupt)
    facts.label("model", ev.model, LABEL_LIMIT)
    facts.label("agent_type", ev.agent_type, LABEL_LIMIT)
    facts.label("permission_mode", ev.permission_mode, LABEL_LIMIT)
    facts.label("cwd", ev.cwd, PATH_LIMIT)
    if ev.event in PROMPT_EVENTS:
        facts.text("prompt", ev.prompt, INPUT_LIMIT)
    if ev.event in _MESSAGE_EVENTS:
        facts.text("last_assistant_message", ev.last_assistant_message, INPUT_LIMIT)
    if ev.error is not None and ev.event not in RESPONSE_EVENTS:
        facts.text("error", ev.error, HEAD_LIMIT)  # StopFailure's error class
    return facts.result()


def _tool_input(facts: _Facts, ev: LifecycleEvent, decision: Decision, secret: bool) -> None:
    if secret:
        facts.plain("input", REDACTED)
        return
    original, original_text = redacted_input(ev.tool_input)
    modified = decision.outcome == "modify" and decision.replacement is not None
    effective, effective_text = (
        redacted_input(decision.replacement) if modified else (original, original_text)
    )
    facts.text("input_summary", input_summary(ev.tool_name, effective), SUMMARY_LIMIT, redact=False)
    facts.value("input", effective, effective_text)
    if modified:
        facts.value("original_input", original, original_text)


def _response(facts: _Facts, ev: LifecycleEvent, secret: bool) -> None:
    response = ev.tool_response
    failed = ev.event == "PostToolUseFailure" or (
        isinstance(response, dict) and response.get("is_error") is True
    )
    facts.plain("is_error", failed)
    if ev.error is not None:
        facts.text("error", ev.error, HEAD_LIMIT)
    if response is None:
        return
    text = response if isinstance(response, str) else compact_json(response)
    raw = text.encode()
    summary: dict[str, Any] = {"bytes": len(raw)}
    if secret:
        summary["head"] = REDACTED
        facts.sized("response", summary, len(REDACTED), False)
        return
    # The digest covers the whole response as the runtime sent it (a string's UTF-8, or
    # compact JSON), so an auditor holding the output can prove which one it was.
    summary["sha256"] = hashlib.sha256(raw).hexdigest()
    head, cut = redact_text(text, HEAD_LIMIT)
    summary["head"] = head
    facts.sized("response", summary, len(head.encode()), cut)
