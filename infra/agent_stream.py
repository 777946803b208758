"""Agent stdout → activity records: Claude Code stream-json, Codex `exec --json`, or plain text.

Claude Code (`claude -p --output-format stream-json --verbose`) prints one JSON object
a line: `system` (init, retries), `assistant` with content blocks (`text`, `tool_use`),
`user` with `tool_result` blocks, and a final `result` (`result` text, `is_error`).
Codex (`codex exec --json`) prints thread events: `thread.started`, `turn.*`,
`item.started|updated|completed` with items (`agent_message`, `reasoning`,
`command_execution`, `file_change`, `mcp_tool_call`, `web_search`, `todo_list`,
`error`) and top-level `error`. Anything else becomes a `text` record.
"""

from __future__ import annotations

import json
from typing import Any

from domain.strict_json import StrictJSONError, strict_loads

Record = dict[str, Any]


def _record(kind: str, agent: str | None, **fields: Any) -> Record:
    return {"kind": kind, "agent": agent, **{k: v for k, v in fields.items() if v is not None}}


def _blocks_text(content: Any) -> str | None:
    """Text of a tool result's content: a string or a list of content blocks."""
    if content is None or isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [
            b.get("text", "") if isinstance(b, dict) and b.get("type") == "text" else json.dumps(b)
            for b in content
        ]
        return "\n".join(parts)
    return json.dumps(content)


class AgentStream:
    """Parses one attempt's stdout line by line; remembers what the outcome needs."""

    def __init__(self) -> None:
        self.agent: str | None = None
        self.last_text: str | None = None
        self.final_result: str | None = None
        self.last_error: str | None = None
        self._tools: dict[str, str] = {}  # tool_use id → tool name (Claude)

    @property
    def outcome(self) -> str | None:
        """The final answer: Claude's `result`, else the last text the agent printed."""
        return self.final_result if self.final_result is not None else self.last_text

    def parse(self, line: str) -> list[Record]:
        """Activity records for one stdout line (possibly none, for pure noise)."""
        stripped = line.strip()
        if not stripped:
            return []
        event: Any = None
        if stripped.startswith("{"):
            try:
                # Strict: an agent's NaN, lone surrogate or deep nesting stays text.
                event = strict_loads(stripped)
            except StrictJSONError:
                event = None
        records: list[Record] | None = None
        if isinstance(event, dict):
            kind = event.get("type")
            if kind in ("system", "assistant", "user", "result", "stream_event"):
                records = self._claude(event)
            elif isinstance(kind, str) and (
                kind.startswith(("thread.", "turn.", "item.")) or kind == "error"
            ):
                records = self._codex(event)
            elif isinstance(event.get("msg"), dict) and "id" in event:
                records = self._codex_legacy(event["msg"])
        if records is None:
            records = [_record("text", None, text=line.rstrip("\r\n"))]
        for record in records:
            if record["kind"] == "text" and record.get("text"):
                self.last_text = record["text"]
            elif record["kind"] == "error" and record.get("error"):
                self.last_error = record["error"]
        return records

    # Claude Code stream-json

    def _claude(self, event: dict[str, Any]) -> list[Record] | None:
        self.agent = "claude"
        kind = event["type"]
        if kind == "stream_event":
            return []  # partial deltas: the complete message follows as `assistant`
        if kind == "system":
            subtype = event.get("subtype", "system")
            detail = f" (model {event['model']})" if event.get("model") else ""
            return [_record("status", "claude", text=f"{subtype}{detail}")]
        if kind == "result":
            text = event.get("result")
            if event.get("is_error") or str(event.get("subtype", "")).startswith("error"):
                message = text or str(event.get("subtype", "error"))
                return [_record("error", "claude", error=message)]
            if isinstance(text, str):
                self.final_result = text
            return [_record("status", "claude", text=f"result: {event.get('subtype', 'done')}")]
        message = event.get("message")
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, str):
            return [_record("text", "claude", text=content)] if kind == "assistant" else []
        if not isinstance(content, list):
            return None
        records: list[Record] = []
        for block in content:
            if not isinstance(block, dict):
                continue
            btype = block.get("type")
            if btype == "text" and kind == "assistant":
                records.append(_record("text", "claude", text=block.get("text", "")))
            elif btype == "tool_use":
                name = block.get("name")
                if isinstance(block.get("id"), str) and isinstance(name, str):
                    self._tools[block["id"]] = name
                records.append(_record("tool_call", "claude", tool=name, args=block.get("input")))
            elif btype == "tool_result":
                tool = self._tools.get(str(block.get("tool_use_id")))
                text = _blocks_text(block.get("content"))
                if block.get("is_error"):
                    records.append(_record("tool_result", "claude", tool=tool, error=text))
                else:
                    records.append(_record("tool_result", "claude", tool=tool, result=text))
        return records

    # Codex exec --json

    def _codex(self, event: dict[str, Any]) -> list[Record]:
        self.agent = "codex"
        kind = event["type"]
        if kind == "error":
            return [_record("error", "codex", error=str(event.get("message", "error")))]
        if kind == "turn.failed":
            error = event.get("error")
            message = error.get("message") if isinstance(error, dict) else error
            return [_record("error", "codex", error=str(message or "turn failed"))]
        if kind == "thread.started":
            return [_record("status", "codex", text="thread started")]
        if kind == "turn.completed":
            return [_record("status", "codex", text="turn completed")]
        item = event.get("item")
        if not isinstance(item, dict) or kind not in ("item.started", "item.completed"):
            return []  # turn.started, item.updated (todo progress): noise
        return self._codex_item(item, started=kind == "item.started")

    def _codex_item(self, item: dict[str, Any], *, started: bool) -> list[Record]:
        itype = item.get("type") or item.get("item_type")
        if itype == "command_execution":
            if started:
                return [
                    _record(
                        "tool_call", "codex", tool="shell", args={"command": item.get("command")}
                    )
                ]
            code = item.get("exit_code")
            failed = item.get("status") in ("failed", "declined") or (code not in (None, 0))
            output = item.get("aggregated_output")
            if failed:
                return [
                    _record(
                        "tool_result", "codex", tool="shell", result=output, error=f"exit {code}"
                    )
                ]
            return [_record("tool_result", "codex", tool="shell", result=output)]
        if itype == "mcp_tool_call":
            tool = f"{item.get('server')}.{item.get('tool')}"
            if started:
                return [_record("tool_call", "codex", tool=tool, args=item.get("arguments"))]
            error = item.get("error")
            message = error.get("message") if isinstance(error, dict) else error
            return [
                _record("tool_result", "codex", tool=tool, result=item.get("result"), error=message)
            ]
        if started:
            return []  # other items are only interesting once completed
        if itype == "agent_message":
            return [_record("text", "codex", text=item.get("text", ""))]
        if itype == "reasoning":
            return [_record("status", "codex", text=f"reasoning: {item.get('text', '')}")]
        if itype == "file_change":
            return [_record("tool_result", "codex", tool="apply_patch", result=item.get("changes"))]
        if itype == "web_search":
            return [
                _record("tool_call", "codex", tool="web_search", args={"query": item.get("query")})
            ]
        if itype == "todo_list":
            items = item.get("items") or []
            done = sum(1 for i in items if isinstance(i, dict) and i.get("completed"))
            return [_record("status", "codex", text=f"todo: {done}/{len(items)} done")]
        if itype == "error":
            return [_record("error", "codex", error=str(item.get("message", "error")))]
        return [_record("status", "codex", text=str(itype))]

    def _codex_legacy(self, msg: dict[str, Any]) -> list[Record]:
        """The pre-0.44 `codex exec --json` shape: `{"id", "msg": {"type", ...}}`."""
        self.agent = "codex"
        mtype = msg.get("type")
        if mtype == "agent_message":
            return [_record("text", "codex", text=str(msg.get("message", "")))]
        if mtype == "exec_command_begin":
            return [
                _record("tool_call", "codex", tool="shell", args={"command": msg.get("command")})
            ]
        if mtype == "exec_command_end":
            code = msg.get("exit_code")
            output = msg.get("aggregated_output") or msg.get("stdout") or msg.get("stderr")
            error = f"exit {code}" if code not in (None, 0) else None
            return [_record("tool_result", "codex", tool="shell", result=output, error=error)]
        if mtype in ("error", "stream_error"):
            return [_record("error", "codex", error=str(msg.get("message", "error")))]
        if mtype == "task_complete" and msg.get("last_agent_message"):
            self.final_result = str(msg["last_agent_message"])
        return (
            []
            if mtype in ("agent_message_delta", "agent_reasoning_delta", "token_count")
            else [_record("status", "codex", text=str(mtype))]
        )
