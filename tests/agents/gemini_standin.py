"""A small, scripted stand-in of the Gemini API (generativelanguage), on 127.0.0.1 only.

Gemini CLI 0.61.0 talks to `GOOGLE_GEMINI_BASE_URL` (with `GEMINI_API_KEY` set and, in
`~/.gemini/settings.json`, `security.auth.selectedType: "gemini-api-key"`): it streams
`POST /v1beta/models/<model>:streamGenerateContent?alt=sse` (server-sent events, each a
whole `GenerateContentResponse` chunk) and may call `:generateContent` (side queries, e.g.
the model router's classifier, which asks for JSON) and `:countTokens`. This server
answers all of them, minimally, and records every request (method, path, a few headers, the
JSON body) so a test can check what the CLI sent back: `functionResponse` parts carry tool
results, and a hook's deny reason.

What the model "says" is decided by a responder: a function of the request body that
returns a `ToolUse` (a `functionCall` part, e.g. `run_shell_command` {command, description}
or `write_file` {file_path, content}) or a `Text`. `conversation_turn` counts the function
responses already sent back, to script a run step by step.
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

from tests.agents import standin_server as base  # noqa: E402

# What a script says the model does (Reply, Responder: in standin_server).
ToolUse = base.ToolUse
Text = base.Text

LOGGED_HEADERS = ("user-agent", "content-type", "x-goog-api-client", "accept")
# google.rpc status names of the errors the stand-in gives.
STATUS_NAMES = {400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 404: "NOT_FOUND"}


def parts(content: dict[str, Any]) -> list[dict[str, Any]]:
    return [p for p in content.get("parts") or [] if isinstance(p, dict)]


def text_of(value: Any) -> str:
    """All the text in a content, a part list, a function response or a system instruction."""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return "\n".join(text_of(v) for v in value)
    if isinstance(value, dict):
        if "functionResponse" in value:
            return json.dumps(value["functionResponse"].get("response"))
        for key in ("text", "parts"):
            if key in value:
                return text_of(value[key])
    return ""


def function_responses(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The functionResponse objects the CLI sent back so far in this conversation, in order."""
    return [
        p["functionResponse"]
        for c in body.get("contents") or []
        if isinstance(c, dict)
        for p in parts(c)
        if isinstance(p.get("functionResponse"), dict)
    ]


def first_prompt(body: dict[str, Any]) -> str:
    for c in body.get("contents") or []:
        if isinstance(c, dict) and c.get("role") == "user":
            return text_of(parts(c))
    return ""


def conversation_turn(body: dict[str, Any]) -> int:
    """How many function responses this conversation already holds: the step to answer next."""
    return len(function_responses(body))


def tool_names(body: dict[str, Any]) -> list[str]:
    return [
        str(d.get("name"))
        for t in body.get("tools") or []
        if isinstance(t, dict)
        for d in t.get("functionDeclarations") or []
        if isinstance(d, dict)
    ]


def is_agent_loop(body: dict[str, Any]) -> bool:
    """Whether a request is the agent's own turn (it declares functions), not a side query."""
    return bool(tool_names(body))


class GeminiHandler(base.RecordingHandler):
    def do_GET(self) -> None:
        entry = self.record(None)
        if self.path.split("?")[0].rstrip("/").endswith("/models"):
            self.send_json(200, {"models": []})
            return
        self.send_error_json(entry, 404, f"no {self.path} here")

    def do_POST(self) -> None:
        body = self.body()
        entry = self.record(body)
        path = self.path.split("?")[0]
        method = path.rsplit(":", 1)[-1] if ":" in path else ""
        if method == "countTokens":
            self.send_json(200, {"totalTokens": 100})
            return
        reply = self.model_reply(entry, body)
        if reply is None:
            return
        model = path.rsplit("/", 1)[-1].split(":")[0]
        chunk = response(model, reply, self.standin.next_id())
        if method == "generateContent":
            self.send_json(200, chunk)
            return
        self.start_stream()
        self.wfile.write(f"data: {json.dumps(chunk)}\r\n\r\n".encode())
        self.end_stream()

    def send_error_json(self, entry: base.Recorded, status: int, message: str) -> None:
        entry.status = status
        error = {"code": status, "message": message, "status": STATUS_NAMES.get(status, "UNKNOWN")}
        self.send_json(status, {"error": error})


@dataclass
class GeminiStandIn(base.StandInServer):
    """`with GeminiStandIn(responder) as api:` serves on `api.url` until the block ends.

    Set `GOOGLE_GEMINI_BASE_URL=api.url`. Side queries (no functions declared) get
    `side_text`, or `side_json` when they ask for JSON (`responseMimeType`).
    """

    side_json: str = '{"reasoning": "stand-in", "model_choice": "flash"}'

    Handler = GeminiHandler
    logged_headers = LOGGED_HEADERS
    secret_headers = ("x-goog-api-key", "authorization")

    def is_model_path(self, path: str) -> bool:
        return path.endswith((":streamGenerateContent", ":generateContent"))

    def is_agent_loop(self, body: dict[str, Any]) -> bool:
        return is_agent_loop(body)

    def side_reply(self, body: dict[str, Any]) -> base.Reply:
        config = body.get("generationConfig") or body.get("config") or {}
        if "json" in str(config.get("responseMimeType") or ""):
            return Text(self.side_json)
        return Text(self.side_text)

    def check(self, body: dict[str, Any], reply: ToolUse) -> None:
        if reply.name not in tool_names(body):
            raise ValueError(f"no function {reply.name!r}: {tool_names(body)}")
        if not isinstance(reply.input, dict):
            raise ValueError(f"{reply.name!r} takes an argument object, not text")


def response(model: str, reply: base.Reply, number: int) -> dict[str, Any]:
    """One whole GenerateContentResponse (also the single chunk of a streamed one)."""
    if isinstance(reply, ToolUse):
        call = {
            "name": reply.name,
            "args": reply.input,
            "id": f"call_standin_{uuid.uuid4().hex[:8]}",
        }
        part: dict[str, Any] = {"functionCall": call}
    else:
        part = {"text": reply.text}
    return {
        "candidates": [
            {"content": {"role": "model", "parts": [part]}, "finishReason": "STOP", "index": 0}
        ],
        "usageMetadata": {
            "promptTokenCount": 100,
            "candidatesTokenCount": 10,
            "totalTokenCount": 110,
        },
        "modelVersion": model,
        "responseId": f"standin-{number:04d}",
    }
