"""A small, scripted stand-in of the OpenAI Chat Completions API, on 127.0.0.1 only.

Qwen Code 0.24.4 with `--auth-type openai` and `OPENAI_BASE_URL` streams
`POST <base>/chat/completions` (`stream: true`, server-sent `chat.completion.chunk`s ending
in `data: [DONE]`); a request without `stream` gets one `chat.completion`. Every request is
recorded, so a test can read what the CLI sent back: `role: "tool"` messages carry tool
results, and a hook's deny reason.

What the model "says" is decided by a responder (standin_server.py): a `ToolUse` becomes one
`tool_calls` entry, a `Text` the message's content. `conversation_turn` counts the tool
results already sent back, to script a run step by step.
"""

from __future__ import annotations

import json
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

if not __package__:  # loaded by path, by a script beside it: the repository's packages
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.agents import openai_responses_standin as responses  # noqa: E402
from tests.agents import standin_server as base  # noqa: E402

ToolUse = base.ToolUse
Text = base.Text


def conversation_turn(body: dict[str, Any]) -> int:
    """How many tool results this conversation already holds: the step to answer next."""
    messages = body.get("messages") or []
    return sum(1 for m in messages if isinstance(m, dict) and m.get("role") == "tool")


def tool_names(body: dict[str, Any]) -> list[str]:
    return [
        str((t.get("function") or {}).get("name"))
        for t in body.get("tools") or []
        if isinstance(t, dict)
    ]


def text_of(body: dict[str, Any]) -> str:
    """All the text of a request's messages (system, user, tool results), joined."""
    out = []
    for message in body.get("messages") or []:
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, str):
            out.append(content)
        elif isinstance(content, list):
            out += [str(p.get("text", "")) for p in content if isinstance(p, dict)]
    return "\n".join(out)


class ChatHandler(responses.ResponsesHandler):
    """The Responses stand-in's handler (its model list, its error shape), answering
    Chat Completions."""

    def do_POST(self) -> None:
        body = self.body()
        entry = self.record(body)
        reply = self.model_reply(entry, body)
        if reply is None:
            return
        number = self.standin.next_id()
        model = str(body.get("model") or "standin")
        message, finish = _message(reply)
        if not body.get("stream"):
            choice = {"index": 0, "message": message, "finish_reason": finish}
            self.send_json(
                200, {**_envelope(model, number, "chat.completion"), "choices": [choice]}
            )
            return
        delta = {**message}
        if "tool_calls" in delta:
            delta["tool_calls"] = [{"index": 0, **c} for c in delta["tool_calls"]]
        chunks = [
            {"index": 0, "delta": delta, "finish_reason": None},
            {"index": 0, "delta": {}, "finish_reason": finish},
        ]
        self.start_stream()
        for choice in chunks:
            chunk = {**_envelope(model, number, "chat.completion.chunk"), "choices": [choice]}
            self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
        usage = {"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110}
        last = {**_envelope(model, number, "chat.completion.chunk"), "choices": [], "usage": usage}
        self.wfile.write(f"data: {json.dumps(last)}\n\ndata: [DONE]\n\n".encode())
        self.end_stream()


def _envelope(model: str, number: int, kind: str) -> dict[str, Any]:
    return {"id": f"chatcmpl-standin-{number:04d}", "object": kind, "created": 0, "model": model}


def _message(reply: base.Reply) -> tuple[dict[str, Any], str]:
    if isinstance(reply, ToolUse):
        arguments = reply.input if isinstance(reply.input, str) else json.dumps(reply.input)
        call = {
            "id": f"call_standin_{uuid.uuid4().hex[:10]}",
            "type": "function",
            "function": {"name": reply.name, "arguments": arguments},
        }
        return {"role": "assistant", "content": None, "tool_calls": [call]}, "tool_calls"
    return {"role": "assistant", "content": reply.text}, "stop"


@dataclass
class ChatStandIn(base.StandInServer):
    """`with ChatStandIn(responder) as api:` serves on `api.url` until the block ends; set
    `OPENAI_BASE_URL=api.url + "/v1"`. Requests that offer no tools get `side_text`."""

    Handler = ChatHandler
    logged_headers = ("user-agent", "content-type")

    def is_model_path(self, path: str) -> bool:
        return path.endswith("/chat/completions")

    def is_agent_loop(self, body: dict[str, Any]) -> bool:
        return bool(tool_names(body))

    def check(self, body: dict[str, Any], reply: ToolUse) -> None:
        if reply.name not in tool_names(body):
            raise ValueError(f"no tool {reply.name!r}: {tool_names(body)}")
