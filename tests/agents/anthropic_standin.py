"""A small, scripted stand-in of Anthropic's Messages API, on 127.0.0.1 only.

Claude Code in `-p` mode talks to `ANTHROPIC_BASE_URL`: it streams `POST /v1/messages`
(server-sent events: message_start, content_block_start/delta/stop, message_delta,
message_stop) and may call side endpoints (count_tokens, models, a `HEAD /api/hello`
connectivity check). This server answers all of them, minimally, and records every
request (method, path, a few headers, the JSON body) so a test can check what the CLI
sent, tool results included. (Seen from 2.1.328 with nonessential traffic off: only
`POST /v1/messages?beta=true`, streamed, one per model turn.)

What the model "says" is decided by a responder: a function of the request body that
returns a `ToolUse` or a `Text`. `conversation_turn` helps script a run step by step:
it counts the tool results the CLI has already sent back in this conversation.

Run as a script (standard library only), it wraps the agent command and reports what the
agent's process was given, inside whatever jail the executor put it in:

    python anthropic_standin.py report --to FILE --host-netns NS -- ARGV...
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import socket
import sys
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

MODEL = "claude-standin-1"
# Headers worth keeping in the request log (never the key's value, only whether it came).
LOGGED_HEADERS = ("anthropic-version", "anthropic-beta", "user-agent", "x-app", "content-type")


@dataclass(frozen=True)
class ToolUse:
    name: str
    input: dict[str, Any]


@dataclass(frozen=True)
class Text:
    text: str


Reply = ToolUse | Text
Responder = Callable[[dict[str, Any]], Reply]


def blocks(message: dict[str, Any]) -> list[dict[str, Any]]:
    content = message.get("content")
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return [b for b in content or [] if isinstance(b, dict)]


def text_of(value: Any) -> str:
    """All the text in a message, a content list, a tool result or a system prompt."""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return "\n".join(text_of(v) for v in value)
    if isinstance(value, dict):
        if value.get("type") == "tool_result":
            return text_of(value.get("content"))
        if "text" in value:
            return str(value["text"])
        if "content" in value:
            return text_of(value["content"])
    return ""


def tool_results(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The tool_result blocks the CLI sent back so far in this conversation, in order."""
    return [
        b
        for m in body.get("messages", [])
        if m.get("role") == "user"
        for b in blocks(m)
        if b.get("type") == "tool_result"
    ]


def first_prompt(body: dict[str, Any]) -> str:
    """The text of the conversation's first user message (the `-p` prompt, plus context)."""
    for m in body.get("messages", []):
        if m.get("role") == "user":
            return text_of(blocks(m))
    return ""


def conversation_turn(body: dict[str, Any]) -> int:
    """How many tool results this conversation already holds: the step to answer next."""
    return len(tool_results(body))


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


@dataclass
class AnthropicStandIn:
    """`with AnthropicStandIn(responder) as api:` serves on `api.url` until the block ends."""

    responder: Responder
    side_text: str = "OK"  # what requests that offer no tools (titles, summaries) get
    requests: list[Recorded] = field(default_factory=list)
    # A responder that raised: answered 400 (which Claude Code does not retry), kept here.
    errors: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self.port = int(self._server.server_address[1])
        self.url = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> AnthropicStandIn:
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
                if r.path.split("?")[0] == "/v1/messages"
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
                if self.headers.get("x-api-key"):
                    headers["x-api-key"] = "present"
                if self.headers.get("authorization"):
                    headers["authorization"] = "present"
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
                path = self.path.split("?")[0]
                if path.startswith("/v1/models"):
                    model = {"type": "model", "id": MODEL, "display_name": "Stand-in"}
                    self._json(200, {"data": [model], "has_more": False})
                    return
                self._not_found()

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
                if path == "/v1/messages/count_tokens":
                    self._json(200, {"input_tokens": 100})
                    return
                if path != "/v1/messages" or not isinstance(body, dict):
                    self._not_found()
                    return
                try:
                    reply = standin._reply_for(body)
                except Exception as exc:  # a broken script must show, not hang the CLI
                    standin.errors.append(f"{type(exc).__name__}: {exc}")
                    error = {"type": "invalid_request_error", "message": f"stand-in: {exc}"}
                    self._json(400, {"type": "error", "error": error})
                    return
                entry.reply = repr(reply)
                message_id = f"msg_standin{next(standin._ids):04d}"
                model = str(body.get("model") or MODEL)
                if body.get("stream"):
                    self._stream(message_id, model, reply)
                else:
                    self._json(200, message(message_id, model, reply))

            def _not_found(self) -> None:
                error = {"type": "not_found_error", "message": f"no {self.path} here"}
                self._json(404, {"type": "error", "error": error})

            def _stream(self, message_id: str, model: str, reply: Reply) -> None:
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.send_header("cache-control", "no-cache")
                self.send_header("connection", "close")
                self.end_headers()
                for event, data in sse_events(message_id, model, reply):
                    self.wfile.write(f"event: {event}\ndata: {json.dumps(data)}\n\n".encode())
                self.wfile.flush()
                self.close_connection = True

        return Handler


def _content(reply: Reply, tool_id: str) -> dict[str, Any]:
    if isinstance(reply, ToolUse):
        return {"type": "tool_use", "id": tool_id, "name": reply.name, "input": reply.input}
    return {"type": "text", "text": reply.text}


def _usage(output_tokens: int) -> dict[str, int]:
    return {
        "input_tokens": 100,
        "output_tokens": output_tokens,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
    }


def message(message_id: str, model: str, reply: Reply) -> dict[str, Any]:
    """A whole (non-streamed) Messages API response."""
    tool_id = f"toolu_standin_{uuid.uuid4().hex[:12]}"
    return {
        "id": message_id,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [_content(reply, tool_id)],
        "stop_reason": "tool_use" if isinstance(reply, ToolUse) else "end_turn",
        "stop_sequence": None,
        "usage": _usage(10),
    }


def sse_events(message_id: str, model: str, reply: Reply) -> list[tuple[str, dict[str, Any]]]:
    """The server-sent events of one streamed response carrying one content block."""
    start: dict[str, Any] = {
        "id": message_id,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": _usage(1),
    }
    events: list[tuple[str, dict[str, Any]]] = [
        ("message_start", {"type": "message_start", "message": start})
    ]
    if isinstance(reply, ToolUse):
        tool_id = f"toolu_standin_{uuid.uuid4().hex[:12]}"
        block = {"type": "tool_use", "id": tool_id, "name": reply.name, "input": {}}
        delta = {"type": "input_json_delta", "partial_json": json.dumps(reply.input)}
        stop_reason = "tool_use"
    else:
        block = {"type": "text", "text": ""}
        delta = {"type": "text_delta", "text": reply.text}
        stop_reason = "end_turn"
    events += [
        (
            "content_block_start",
            {"type": "content_block_start", "index": 0, "content_block": block},
        ),
        ("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": delta}),
        ("content_block_stop", {"type": "content_block_stop", "index": 0}),
        (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": stop_reason, "stop_sequence": None},
                "usage": {"output_tokens": 10},
            },
        ),
        ("message_stop", {"type": "message_stop"}),
    ]
    return events


# What the agent's process got: run as a wrapper around the agent command.

# Variables whose value the report may show (the rest only by name).
SHOWN = ("ANTHROPIC_BASE_URL", "TACHOGRAPH_URL", "HOME")


def report(argv: list[str]) -> int:
    """Append what the command is given (cwd, network, environment) to a file, then run it."""
    parser = argparse.ArgumentParser(prog="anthropic_standin.py report")
    parser.add_argument("--to", required=True, help="append a JSON line here")
    parser.add_argument("--host-netns", required=True, help="the host's network namespace")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command")
    seen = {
        "command": os.path.basename(command[0]),
        "cwd": os.getcwd(),
        "netns": os.readlink("/proc/self/ns/net"),
        "hostNetns": args.host_netns,
        "interfaces": sorted(name for _, name in socket.if_nameindex()),
        "run": sorted(os.listdir("/run")),
        "env": sorted(os.environ),
        "shown": {k: os.environ[k] for k in SHOWN if k in os.environ},
    }
    with open(args.to, "a", encoding="utf-8") as out:
        out.write(json.dumps(seen) + "\n")
    os.execvp(command[0], command)


if __name__ == "__main__":
    if sys.argv[1:2] != ["report"]:
        sys.exit("usage: anthropic_standin.py report --to FILE --host-netns NS -- ARGV...")
    sys.exit(report(sys.argv[2:]))
