"""A small, scripted stand-in of OpenAI's Responses API, on 127.0.0.1 only.

Two CLIs can be pointed at it, both with the streaming Responses wire format:

- Codex 0.169.0, through a custom provider in `$CODEX_HOME/config.toml`
  (`[model_providers.standin] base_url = "<url>/v1", wire_api = "responses",
  env_key = "STANDIN_API_KEY"`): it streams `POST /v1/responses`.
- Copilot CLI 1.0.102, with `COPILOT_PROVIDER_BASE_URL=<url>/v1`,
  `COPILOT_PROVIDER_TYPE=openai`, `COPILOT_PROVIDER_WIRE_API=responses`: it streams
  `POST /v1/responses` too.

(tests/fixtures/SOURCES.md says how each CLI was run against such a stand-in.) Every request
(method, path, a few headers, the JSON body) is recorded so a test can check what the CLI
sent back: `function_call_output` / `custom_tool_call_output` items carry tool results, and
a hook's deny reason.

What the model "says" is decided by a responder: a function of the request body that
returns a `ToolUse` or a `Text`. A `ToolUse` becomes a `function_call` item (arguments
JSON-encoded) when the request declares that tool as a function, or a `custom_tool_call`
item (free-form `input` string) when it declares it `"type": "custom"` (Codex's and
Copilot's `apply_patch` are such tools: give the patch text as `input`).
`conversation_turn` counts the tool outputs already sent back, to script a run step by step.
"""

from __future__ import annotations

import itertools
import json
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

if not __package__:  # loaded by path, by a script beside it: the repository's packages
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.agents import standin_server as base  # noqa: E402

# What a script says the model does (Reply, Responder: in standin_server).
ToolUse = base.ToolUse
Text = base.Text

MODEL = "gpt-standin-1"
LOGGED_HEADERS = (
    "user-agent",
    "content-type",
    "content-encoding",
    "accept",
    "originator",
    "openai-beta",
    "version",
    "session_id",
    "x-initiator",
    "copilot-integration-id",
)
OUTPUT_TYPES = ("function_call_output", "custom_tool_call_output")


def items(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The request's input items (a bare string input counts as one user message)."""
    value = body.get("input")
    if isinstance(value, str):
        return [{"type": "message", "role": "user", "content": value}]
    return [i for i in value or [] if isinstance(i, dict)]


def text_of(value: Any) -> str:
    """All the text in an item, a content list or a tool output."""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return "\n".join(text_of(v) for v in value)
    if isinstance(value, dict):
        for key in ("text", "output", "content"):
            if key in value:
                return text_of(value[key])
    return ""


def tool_outputs(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The tool outputs the CLI sent back so far in this conversation, in order."""
    return [i for i in items(body) if i.get("type") in OUTPUT_TYPES]


def tool_calls(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The tool calls the (stand-in) model made so far, as replayed by the CLI."""
    return [i for i in items(body) if i.get("type") in ("function_call", "custom_tool_call")]


def user_texts(body: dict[str, Any]) -> list[str]:
    return [text_of(i.get("content")) for i in items(body) if i.get("role") == "user"]


def developer_texts(body: dict[str, Any]) -> list[str]:
    """The developer (system-like) messages: instructions, injected context, a reviewer's
    brief."""
    return [text_of(i.get("content")) for i in items(body) if i.get("role") == "developer"]


def first_prompt(body: dict[str, Any]) -> str:
    """The text of the last user message before any tool call (the prompt, usually)."""
    texts = user_texts(body)
    return texts[-1] if texts else ""


def conversation_turn(body: dict[str, Any]) -> int:
    """How many tool outputs this conversation already holds: the step to answer next."""
    return len(tool_outputs(body))


def tool_names(body: dict[str, Any]) -> list[str]:
    names = []
    for tool in body.get("tools") or []:
        if isinstance(tool, dict):
            names.append(str(tool.get("name") or (tool.get("function") or {}).get("name")))
    return names


def tool_kind(body: dict[str, Any], name: str) -> str | None:
    """`function`, `custom` (free-form input) or None if the request offers no such tool."""
    for tool in body.get("tools") or []:
        if isinstance(tool, dict) and (
            tool.get("name") == name or (tool.get("function") or {}).get("name") == name
        ):
            return str(tool.get("type") or "function")
    return None


def is_agent_loop(body: dict[str, Any]) -> bool:
    """Whether a request is the agent's own turn (it offers tools), not a side query."""
    return bool(body.get("tools"))


class ResponsesHandler(base.RecordingHandler):
    def do_GET(self) -> None:
        entry = self.record(None)
        if self.path.split("?")[0].rstrip("/").endswith("/models"):
            model = {"id": MODEL, "object": "model", "created": 0, "owned_by": "standin"}
            # OpenAI's list shape, plus Codex's own `models` member.
            self.send_json(200, {"object": "list", "data": [model], "models": []})
            return
        self.send_error_json(entry, 404, f"no {self.path} here")

    def do_POST(self) -> None:
        body = self.body()
        entry = self.record(body)
        reply = self.model_reply(entry, body)
        if reply is None:
            return
        response_id = f"resp_standin{self.standin.next_id():04d}"
        model = str(body.get("model") or MODEL)
        output = [output_item(body, reply)]
        if not body.get("stream"):
            self.send_json(200, response(response_id, model, output, "completed"))
            return
        self.start_stream()
        for event in sse_events(response_id, model, output):
            self.wfile.write(f"event: {event['type']}\ndata: {json.dumps(event)}\n\n".encode())
        self.end_stream()

    def send_error_json(self, entry: base.Recorded, status: int, message: str) -> None:
        entry.status = status
        kind = "not_found" if status == 404 else "invalid_request_error"
        self.send_json(status, {"error": {"message": message, "type": kind}})


@dataclass
class ResponsesStandIn(base.StandInServer):
    """`with ResponsesStandIn(responder) as api:` serves on `api.url` until the block ends;
    point the CLI at `api.base_url` (`<url>/v1`)."""

    Handler = ResponsesHandler
    logged_headers = LOGGED_HEADERS
    secret_headers = ("authorization", "api-key")

    def __post_init__(self) -> None:
        super().__post_init__()
        self.base_url = f"{self.url}/v1"

    def is_model_path(self, path: str) -> bool:
        return path.endswith("/responses")

    def is_agent_loop(self, body: dict[str, Any]) -> bool:
        return is_agent_loop(body)

    def check(self, body: dict[str, Any], reply: ToolUse) -> None:
        kind = tool_kind(body, reply.name)
        if kind is None:
            raise ValueError(f"the request offers no tool {reply.name!r}: {tool_names(body)}")
        if kind == "custom" and not isinstance(reply.input, str):
            raise ValueError(f"{reply.name!r} is a custom (free-form) tool: give its input as text")


def output_item(body: dict[str, Any], reply: base.Reply) -> dict[str, Any]:
    """The one output item of a response carrying `reply`, status completed."""
    if isinstance(reply, Text):
        return {
            "type": "message",
            "id": f"msg_standin_{uuid.uuid4().hex[:12]}",
            "status": "completed",
            "role": "assistant",
            "content": [{"type": "output_text", "text": reply.text, "annotations": []}],
        }
    call_id = f"call_standin_{uuid.uuid4().hex[:12]}"
    if tool_kind(body, reply.name) == "custom":
        return {
            "type": "custom_tool_call",
            "id": f"ctc_standin_{uuid.uuid4().hex[:12]}",
            "status": "completed",
            "call_id": call_id,
            "name": reply.name,
            "input": reply.input,
        }
    arguments = reply.input if isinstance(reply.input, str) else json.dumps(reply.input)
    return {
        "type": "function_call",
        "id": f"fc_standin_{uuid.uuid4().hex[:12]}",
        "status": "completed",
        "call_id": call_id,
        "name": reply.name,
        "arguments": arguments,
    }


def response(
    response_id: str, model: str, output: list[dict[str, Any]], status: str
) -> dict[str, Any]:
    return {
        "id": response_id,
        "object": "response",
        "created_at": int(time.time()),
        "status": status,
        "error": None,
        "incomplete_details": None,
        "model": model,
        "output": output,
        "parallel_tool_calls": False,
        "tool_choice": "auto",
        "tools": [],
        "usage": (
            {
                "input_tokens": 100,
                "input_tokens_details": {"cached_tokens": 0},
                "output_tokens": 10,
                "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": 110,
            }
            if status == "completed"
            else None
        ),
    }


def sse_events(response_id: str, model: str, output: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The server-sent events of one streamed response (each event's `type` names it)."""
    seq = itertools.count()
    events: list[dict[str, Any]] = []

    def emit(kind: str, **data: Any) -> None:
        events.append({"type": kind, "sequence_number": next(seq), **data})

    emit("response.created", response=response(response_id, model, [], "in_progress"))
    emit("response.in_progress", response=response(response_id, model, [], "in_progress"))
    for index, item in enumerate(output):
        item_id = item["id"]
        if item["type"] == "message":
            text = item["content"][0]["text"]
            emit(
                "response.output_item.added",
                output_index=index,
                item={**item, "status": "in_progress", "content": []},
            )
            empty = {"type": "output_text", "text": "", "annotations": []}
            emit(
                "response.content_part.added",
                item_id=item_id,
                output_index=index,
                content_index=0,
                part=empty,
            )
            emit(
                "response.output_text.delta",
                item_id=item_id,
                output_index=index,
                content_index=0,
                delta=text,
                logprobs=[],
            )
            emit(
                "response.output_text.done",
                item_id=item_id,
                output_index=index,
                content_index=0,
                text=text,
                logprobs=[],
            )
            emit(
                "response.content_part.done",
                item_id=item_id,
                output_index=index,
                content_index=0,
                part=item["content"][0],
            )
        elif item["type"] == "function_call":
            emit(
                "response.output_item.added",
                output_index=index,
                item={**item, "status": "in_progress", "arguments": ""},
            )
            emit(
                "response.function_call_arguments.delta",
                item_id=item_id,
                output_index=index,
                delta=item["arguments"],
            )
            emit(
                "response.function_call_arguments.done",
                item_id=item_id,
                output_index=index,
                arguments=item["arguments"],
            )
        else:  # custom_tool_call
            emit(
                "response.output_item.added",
                output_index=index,
                item={**item, "status": "in_progress", "input": ""},
            )
            emit(
                "response.custom_tool_call_input.delta",
                item_id=item_id,
                output_index=index,
                delta=item["input"],
            )
            emit(
                "response.custom_tool_call_input.done",
                item_id=item_id,
                output_index=index,
                input=item["input"],
            )
        emit("response.output_item.done", output_index=index, item=item)
    emit("response.completed", response=response(response_id, model, output, "completed"))
    return events
