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
import json
import os
import socket
import sys
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if not __package__:  # loaded by path, by a script beside it: the repository's packages
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.agents import standin_server as base  # noqa: E402

# What a script says the model does (Reply, Responder: in standin_server).
ToolUse = base.ToolUse
Text = base.Text
Reply = base.Reply
Responder = base.Responder
Recorded = base.Recorded

MODEL = "claude-standin-1"
# Headers worth keeping in the request log (never the key's value, only whether it came).
LOGGED_HEADERS = ("anthropic-version", "anthropic-beta", "user-agent", "x-app", "content-type")


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


class MessagesHandler(base.RecordingHandler):
    def do_GET(self) -> None:
        entry = self.record(None)
        if self.path.split("?")[0].startswith("/v1/models"):
            model = {"type": "model", "id": MODEL, "display_name": "Stand-in"}
            self.send_json(200, {"data": [model], "has_more": False})
            return
        self.send_error_json(entry, 404, f"no {self.path} here")

    def do_POST(self) -> None:
        body = self.body()
        entry = self.record(body)
        path = self.path.split("?")[0]
        if path == "/v1/messages/count_tokens":
            self.send_json(200, {"input_tokens": 100})
            return
        reply = self.model_reply(entry, body)
        if reply is None:
            return
        message_id = f"msg_standin{self.standin.next_id():04d}"
        model = str(body.get("model") or MODEL)
        usage = None
        standin = self.standin
        if isinstance(standin, AnthropicStandIn) and standin.usage_for is not None:
            usage = standin.usage_for(len(standin.reported))
            standin.reported.append(usage)
        if not body.get("stream"):
            self.send_json(200, message(message_id, model, reply, usage))
            return
        self.start_stream()
        hold = standin.held_end() if isinstance(standin, AnthropicStandIn) else None
        for event, data in sse_events(message_id, model, reply, usage):
            self.wfile.write(f"event: {event}\ndata: {json.dumps(data)}\n\n".encode())
            if event == "content_block_stop" and hold is not None:
                self.wfile.flush()
                hold()
        self.end_stream()

    def send_error_json(self, entry: base.Recorded, status: int, message: str) -> None:
        # A 400 for a script that raised: Claude Code does not retry it.
        entry.status = status
        kind = "not_found_error" if status == 404 else "invalid_request_error"
        self.send_json(status, {"type": "error", "error": {"type": kind, "message": message}})


@dataclass
class AnthropicStandIn(base.StandInServer):
    """`with AnthropicStandIn(responder) as api:` serves on `api.url` until the block ends;
    requests that offer no tools (titles, summaries) get `side_text`."""

    Handler = MessagesHandler
    logged_headers = LOGGED_HEADERS
    secret_headers = ("x-api-key", "authorization")
    # The `usage` of the n-th model response (from 0), when a test wants its own figures;
    # each one given is kept in `reported`, in order.
    usage_for: Callable[[int], dict[str, int]] | None = None
    reported: list[dict[str, int]] = field(default_factory=list)
    # Called with the n-th streamed response (from 0) once its content block is out and
    # before its usage and end: Claude Code already runs a complete tool call then.
    before_message_end: Callable[[int], None] | None = None
    streamed: int = 0

    def held_end(self) -> Callable[[], None] | None:
        """What to wait on before this streamed response's end (None: nothing)."""
        hold = self.before_message_end
        if hold is None:
            return None
        with self._lock:
            n, self.streamed = self.streamed, self.streamed + 1
        return lambda: hold(n)

    def is_model_path(self, path: str) -> bool:
        return path == "/v1/messages"

    def is_agent_loop(self, body: dict[str, Any]) -> bool:
        return is_agent_loop(body)


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


def message(
    message_id: str, model: str, reply: Reply, usage: dict[str, int] | None = None
) -> dict[str, Any]:
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
        "usage": usage or _usage(10),
    }


def sse_events(
    message_id: str, model: str, reply: Reply, usage: dict[str, int] | None = None
) -> list[tuple[str, dict[str, Any]]]:
    """The server-sent events of one streamed response carrying one content block; `usage`
    (input and cache counts at message_start, the output count at message_delta)."""
    start: dict[str, Any] = {
        "id": message_id,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {**usage, "output_tokens": 1} if usage else _usage(1),
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
                "usage": {"output_tokens": usage["output_tokens"] if usage else 10},
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
    parser.add_argument(
        "--collector",
        type=int,
        help="through this loopback port (tests/autonomy/record_collector.py): in the jail",
    )
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
    line = json.dumps(seen) + "\n"
    if args.collector is None:
        with open(args.to, "a", encoding="utf-8") as out:
            out.write(line)
    else:
        with socket.create_connection(("127.0.0.1", args.collector), 10) as s:
            s.sendall(json.dumps({"path": args.to, "text": line}).encode())
            s.shutdown(socket.SHUT_WR)
            s.recv(1)  # written
    os.execvp(command[0], command)


if __name__ == "__main__":
    if sys.argv[1:2] != ["report"]:
        sys.exit("usage: anthropic_standin.py report --to FILE --host-netns NS -- ARGV...")
    sys.exit(report(sys.argv[2:]))
