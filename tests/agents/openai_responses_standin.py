"""A small, scripted stand-in of OpenAI's Responses API, on 127.0.0.1 only.

Two CLIs can be pointed at it, both with the streaming Responses wire format:

- Codex 0.169.0, through a custom provider in `$CODEX_HOME/config.toml`
  (`[model_providers.standin] base_url = "<url>/v1", wire_api = "responses",
  env_key = "STANDIN_API_KEY"`): it streams `POST /v1/responses`.
- Copilot CLI 1.0.102, with `COPILOT_PROVIDER_BASE_URL=<url>/v1`,
  `COPILOT_PROVIDER_TYPE=openai`, `COPILOT_PROVIDER_WIRE_API=responses`: it streams
  `POST /v1/responses` too.

(See RECIPES.md next to this file for the whole recipes and the paths seen.) Every request
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
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

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


@dataclass(frozen=True)
class ToolUse:
    """A tool call: `input` is the argument object, or the raw text for a custom tool."""

    name: str
    input: dict[str, Any] | str


@dataclass(frozen=True)
class Text:
    text: str


Reply = ToolUse | Text
Responder = Callable[[dict[str, Any]], Reply]


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


@dataclass
class Recorded:
    method: str
    path: str
    headers: dict[str, str]
    body: Any
    reply: str | None = None
    status: int = 200


@dataclass
class ResponsesStandIn:
    """`with ResponsesStandIn(responder) as api:` serves on `api.url` until the block ends.

    Point the CLI at `api.base_url` (`<url>/v1`). `fail_status` answers every model request
    with that HTTP status instead (e.g. 401) to script an API failure.
    """

    responder: Responder
    side_text: str = "OK"  # what requests that offer no tools (titles, summaries) get
    fail_status: int | None = None
    requests: list[Recorded] = field(default_factory=list)
    # A responder that raised: answered 400, kept here.
    errors: list[str] = field(default_factory=list)
    port: int = 0

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), self._handler())
        self._server.daemon_threads = True
        self.port = int(self._server.server_address[1])
        self.url = f"http://127.0.0.1:{self.port}"
        self.base_url = f"{self.url}/v1"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> ResponsesStandIn:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    # What tests read

    def paths(self) -> list[str]:
        with self._lock:
            return [f"{r.method} {r.path}" for r in self.requests]

    def agent_requests(self) -> list[Recorded]:
        with self._lock:
            return [
                r
                for r in self.requests
                if r.path.split("?")[0].endswith("/responses")
                and isinstance(r.body, dict)
                and is_agent_loop(r.body)
            ]

    # Serving

    def _record(self, entry: Recorded) -> None:
        with self._lock:
            self.requests.append(entry)

    def _reply_for(self, body: dict[str, Any]) -> Reply:
        if not is_agent_loop(body):
            return Text(self.side_text)
        return self.responder(body)

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        standin = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
                pass

            def _body(self) -> Any:
                length = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(length) if length else b""
                if not raw:
                    return None
                try:
                    return json.loads(raw)
                except ValueError:
                    return raw.decode("utf-8", errors="replace")

            def _entry(self, body: Any) -> Recorded:
                headers = {h: self.headers[h] for h in LOGGED_HEADERS if self.headers.get(h)}
                if self.headers.get("authorization"):
                    headers["authorization"] = "present"
                if self.headers.get("api-key"):
                    headers["api-key"] = "present"
                return Recorded(self.command, self.path, headers, body)

            def _json(self, status: int, payload: Any) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                entry = self._entry(None)
                standin._record(entry)
                path = self.path.split("?")[0].rstrip("/")
                if path.endswith("/models"):
                    model = {"id": MODEL, "object": "model", "created": 0, "owned_by": "standin"}
                    # OpenAI's list shape, plus Codex's own `models` member.
                    self._json(200, {"object": "list", "data": [model], "models": []})
                    return
                self._not_found(entry)

            def do_HEAD(self) -> None:
                standin._record(self._entry(None))
                self.send_response(200)
                self.send_header("content-length", "0")
                self.end_headers()

            def do_POST(self) -> None:
                body = self._body()
                entry = self._entry(body)
                standin._record(entry)
                path = self.path.split("?")[0]
                if not path.endswith("/responses") or not isinstance(body, dict):
                    self._not_found(entry)
                    return
                if standin.fail_status:
                    entry.status = standin.fail_status
                    error = {
                        "message": "stand-in: scripted failure",
                        "type": "invalid_request_error",
                    }
                    self._json(standin.fail_status, {"error": error})
                    return
                try:
                    reply = standin._reply_for(body)
                    if isinstance(reply, ToolUse):
                        _check(body, reply)
                except Exception as exc:  # a broken script must show, not hang the CLI
                    standin.errors.append(f"{type(exc).__name__}: {exc}")
                    entry.status = 400
                    error = {"message": f"stand-in: {exc}", "type": "invalid_request_error"}
                    self._json(400, {"error": error})
                    return
                entry.reply = repr(reply)
                response_id = f"resp_standin{next(standin._ids):04d}"
                model = str(body.get("model") or MODEL)
                output = [output_item(body, reply)]
                if body.get("stream"):
                    self._stream(response_id, model, output)
                else:
                    self._json(200, response(response_id, model, output, "completed"))

            def _not_found(self, entry: Recorded) -> None:
                entry.status = 404
                self._json(404, {"error": {"message": f"no {self.path} here", "type": "not_found"}})

            def _stream(self, response_id: str, model: str, output: list[dict[str, Any]]) -> None:
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.send_header("cache-control", "no-cache")
                self.send_header("connection", "close")
                self.end_headers()
                for event in sse_events(response_id, model, output):
                    line = f"event: {event['type']}\ndata: {json.dumps(event)}\n\n"
                    self.wfile.write(line.encode())
                self.wfile.flush()
                self.close_connection = True

        return Handler


def _check(body: dict[str, Any], reply: ToolUse) -> None:
    kind = tool_kind(body, reply.name)
    if kind is None:
        raise ValueError(f"the request offers no tool {reply.name!r}: {tool_names(body)}")
    if kind == "custom" and not isinstance(reply.input, str):
        raise ValueError(f"{reply.name!r} is a custom (free-form) tool: give its input as text")


def output_item(body: dict[str, Any], reply: Reply) -> dict[str, Any]:
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
