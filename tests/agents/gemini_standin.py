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

import itertools
import json
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

LOGGED_HEADERS = ("user-agent", "content-type", "x-goog-api-client", "accept")


@dataclass(frozen=True)
class ToolUse:
    name: str
    input: dict[str, Any]


@dataclass(frozen=True)
class Text:
    text: str


Reply = ToolUse | Text
Responder = Callable[[dict[str, Any]], Reply]


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


@dataclass
class Recorded:
    method: str
    path: str
    headers: dict[str, str]
    body: Any
    reply: str | None = None
    status: int = 200


@dataclass
class GeminiStandIn:
    """`with GeminiStandIn(responder) as api:` serves on `api.url` until the block ends.

    Set `GOOGLE_GEMINI_BASE_URL=api.url`. Side queries (no functions declared) get
    `side_text`, or `side_json` when they ask for JSON (`responseMimeType`).
    `fail_status` answers every model request with that HTTP status (e.g. 401).
    """

    responder: Responder
    side_text: str = "OK"
    side_json: str = '{"reasoning": "stand-in", "model_choice": "flash"}'
    fail_status: int | None = None
    requests: list[Recorded] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    port: int = 0

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), self._handler())
        self._server.daemon_threads = True
        self.port = int(self._server.server_address[1])
        self.url = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> GeminiStandIn:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def paths(self) -> list[str]:
        with self._lock:
            return [f"{r.method} {r.path}" for r in self.requests]

    def agent_requests(self) -> list[Recorded]:
        with self._lock:
            return [
                r
                for r in self.requests
                if ":streamGenerateContent" in r.path or ":generateContent" in r.path
                if isinstance(r.body, dict) and is_agent_loop(r.body)
            ]

    def _record(self, entry: Recorded) -> None:
        with self._lock:
            self.requests.append(entry)

    def _reply_for(self, body: dict[str, Any]) -> Reply:
        if is_agent_loop(body):
            return self.responder(body)
        config = body.get("generationConfig") or body.get("config") or {}
        if "json" in str(config.get("responseMimeType") or ""):
            return Text(self.side_json)
        return Text(self.side_text)

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
                for secret in ("x-goog-api-key", "authorization"):
                    if self.headers.get(secret):
                        headers[secret] = "present"
                return Recorded(self.command, self.path, headers, body)

            def _json(self, status: int, payload: Any) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _error(self, entry: Recorded, status: int, message: str) -> None:
                entry.status = status
                reason = {400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 404: "NOT_FOUND"}
                error = {
                    "code": status,
                    "message": message,
                    "status": reason.get(status, "UNKNOWN"),
                }
                self._json(status, {"error": error})

            def do_GET(self) -> None:
                entry = self._entry(None)
                standin._record(entry)
                if self.path.split("?")[0].rstrip("/").endswith("/models"):
                    self._json(200, {"models": []})
                    return
                self._error(entry, 404, f"no {self.path} here")

            def do_POST(self) -> None:
                body = self._body()
                entry = self._entry(body)
                standin._record(entry)
                path = self.path.split("?")[0]
                method = path.rsplit(":", 1)[-1] if ":" in path else ""
                if method == "countTokens":
                    self._json(200, {"totalTokens": 100})
                    return
                if method not in ("generateContent", "streamGenerateContent") or not isinstance(
                    body, dict
                ):
                    self._error(entry, 404, f"no {self.path} here")
                    return
                if standin.fail_status:
                    self._error(entry, standin.fail_status, "stand-in: scripted failure")
                    return
                try:
                    reply = standin._reply_for(body)
                    if isinstance(reply, ToolUse) and reply.name not in tool_names(body):
                        raise ValueError(f"no function {reply.name!r}: {tool_names(body)}")
                except Exception as exc:  # a broken script must show, not hang the CLI
                    standin.errors.append(f"{type(exc).__name__}: {exc}")
                    self._error(entry, 400, f"stand-in: {exc}")
                    return
                entry.reply = repr(reply)
                model = path.rsplit("/", 1)[-1].split(":")[0]
                chunk = response(model, reply, next(standin._ids))
                if method == "generateContent":
                    self._json(200, chunk)
                    return
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.send_header("cache-control", "no-cache")
                self.send_header("connection", "close")
                self.end_headers()
                self.wfile.write(f"data: {json.dumps(chunk)}\r\n\r\n".encode())
                self.wfile.flush()
                self.close_connection = True

        return Handler


def response(model: str, reply: Reply, number: int) -> dict[str, Any]:
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
