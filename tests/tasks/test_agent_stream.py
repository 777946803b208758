"""Agent stdout mapping: Claude Code stream-json, Codex exec --json, plain text."""

from __future__ import annotations

import json
from typing import Any

from infra.agent_stream import AgentStream


def parse_all(stream: AgentStream, *events: Any) -> list[dict[str, Any]]:
    records: list[dict[str, Any]] = []
    for event in events:
        records += stream.parse(event if isinstance(event, str) else json.dumps(event))
    return records


def test_claude_stream_json_maps_text_tool_calls_results_and_the_final_result() -> None:
    stream = AgentStream()
    records = parse_all(
        stream,
        {"type": "system", "subtype": "init", "model": "claude-sonnet", "session_id": "s"},
        {
            "type": "assistant",
            "message": {
                "content": [
                    {"type": "text", "text": "Let me look."},
                    {
                        "type": "tool_use",
                        "id": "toolu_1",
                        "name": "Bash",
                        "input": {"command": "ls"},
                    },
                ]
            },
        },
        {
            "type": "user",
            "message": {
                "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_1", "content": "a.py\nb.py"}
                ]
            },
        },
        {
            "type": "user",
            "message": {
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_1",
                        "is_error": True,
                        "content": [{"type": "text", "text": "boom"}],
                    }
                ]
            },
        },
        {"type": "result", "subtype": "success", "is_error": False, "result": "All done."},
    )
    assert [(r["kind"], r.get("tool")) for r in records] == [
        ("status", None),
        ("text", None),
        ("tool_call", "Bash"),
        ("tool_result", "Bash"),
        ("tool_result", "Bash"),
        ("status", None),
    ]
    assert records[0]["text"] == "init (model claude-sonnet)"
    assert records[2]["args"] == {"command": "ls"}
    assert records[3]["result"] == "a.py\nb.py"
    assert records[4]["error"] == "boom"
    assert all(r["agent"] == "claude" for r in records)
    assert stream.outcome == "All done."


def test_claude_error_result_is_an_error_record() -> None:
    stream = AgentStream()
    records = parse_all(
        stream,
        {
            "type": "result",
            "subtype": "error_during_execution",
            "is_error": True,
            "result": "API Error: 529 overloaded",
        },
    )
    assert records == [{"kind": "error", "agent": "claude", "error": "API Error: 529 overloaded"}]
    assert stream.last_error == "API Error: 529 overloaded"
    assert stream.outcome is None


def test_codex_exec_json_maps_items() -> None:
    stream = AgentStream()
    command = {"id": "item_1", "type": "command_execution", "command": "bash -lc ls"}
    records = parse_all(
        stream,
        {"type": "thread.started", "thread_id": "t"},
        {"type": "turn.started"},
        {
            "type": "item.started",
            "item": {**command, "aggregated_output": "", "status": "in_progress"},
        },
        {
            "type": "item.completed",
            "item": {
                **command,
                "aggregated_output": "a.py\n",
                "exit_code": 0,
                "status": "completed",
            },
        },
        {
            "type": "item.completed",
            "item": {**command, "aggregated_output": "nope", "exit_code": 2, "status": "failed"},
        },
        {
            "type": "item.started",
            "item": {
                "id": "i2",
                "type": "mcp_tool_call",
                "server": "fs",
                "tool": "read",
                "arguments": {"p": 1},
            },
        },
        {
            "type": "item.completed",
            "item": {
                "id": "i3",
                "type": "file_change",
                "changes": [{"path": "a.py", "kind": "update"}],
            },
        },
        {"type": "item.updated", "item": {"id": "i4", "type": "todo_list", "items": []}},
        {
            "type": "item.completed",
            "item": {"id": "i5", "type": "agent_message", "text": "Fixed it."},
        },
        {"type": "turn.completed", "usage": {"input_tokens": 1}},
    )
    assert [(r["kind"], r.get("tool")) for r in records] == [
        ("status", None),
        ("tool_call", "shell"),
        ("tool_result", "shell"),
        ("tool_result", "shell"),
        ("tool_call", "fs.read"),
        ("tool_result", "apply_patch"),
        ("text", None),
        ("status", None),
    ]
    assert records[1]["args"] == {"command": "bash -lc ls"}
    assert records[2] == {
        "kind": "tool_result",
        "agent": "codex",
        "tool": "shell",
        "result": "a.py\n",
    }
    assert records[3]["error"] == "exit 2"
    assert records[4]["args"] == {"p": 1}
    assert stream.outcome == "Fixed it."


def test_codex_errors_are_error_records() -> None:
    stream = AgentStream()
    records = parse_all(
        stream,
        {"type": "error", "message": "You've hit your usage limit"},
        {"type": "turn.failed", "error": {"message": "stream disconnected"}},
    )
    assert [r["error"] for r in records] == ["You've hit your usage limit", "stream disconnected"]
    assert stream.last_error == "stream disconnected"


def test_anything_else_is_text_and_the_last_text_is_the_outcome() -> None:
    stream = AgentStream()
    records = parse_all(
        stream, "plain output", '{"not": "an event"}', "[1, 2]", "{broken", "", "last"
    )
    assert [r["text"] for r in records] == [
        "plain output",
        '{"not": "an event"}',
        "[1, 2]",
        "{broken",
        "last",
    ]
    assert all(r["kind"] == "text" and r["agent"] is None for r in records)
    assert stream.outcome == "last"
