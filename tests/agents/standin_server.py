"""What the scripted model-API stand-ins share: a threaded HTTP server on 127.0.0.1 only
that records every request, the replies a script gives, and the handler's plumbing.

A stand-in (anthropic_standin.py, openai_responses_standin.py, gemini_standin.py)
subclasses `StandInServer`, names its `Handler` (a `RecordingHandler` answering its API's
routes) and says which requests are the agent's own turns (`is_model_path`,
`is_agent_loop`). What the model "says" is decided by a responder: a function of the
request body that returns a `ToolUse` or a `Text`.
Requests that offer no tools (titles, summaries, a reviewer's verdict) get `side_reply`.
A responder that raises is answered 400 (no CLI retries that) and kept in `errors`, so a
broken script shows instead of hanging the CLI. Standard library only.
"""

from __future__ import annotations

import itertools
import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar, Self


@dataclass(frozen=True)
class ToolUse:
    """A tool call: `input` is the argument object, or the raw text for a free-form tool."""

    name: str
    input: dict[str, Any] | str


@dataclass(frozen=True)
class Text:
    text: str


Reply = ToolUse | Text
Responder = Callable[[dict[str, Any]], Reply]


@dataclass
class Recorded:
    method: str
    path: str
    headers: dict[str, str]
    body: Any
    reply: str | None = None
    status: int = 200


class RecordingHandler(BaseHTTPRequestHandler):
    """A stand-in's request handler: `standin` is the server it records for."""

    protocol_version = "HTTP/1.1"
    standin: ClassVar[StandInServer]

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass

    def body(self) -> Any:
        """The request's JSON body (its text if it is not JSON; None if empty)."""
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length) if length else b""
        if not raw:
            return None
        try:
            return json.loads(raw)
        except ValueError:
            return raw.decode("utf-8", errors="replace")

    def record(self, body: Any) -> Recorded:
        """Keep the request (a few headers; credentials only as "present") and return it."""
        standin = self.standin
        headers = {h: self.headers[h] for h in standin.logged_headers if self.headers.get(h)}
        for secret in standin.secret_headers:
            if self.headers.get(secret):
                headers[secret] = "present"
        entry = Recorded(self.command, self.path, headers, body)
        standin.record(entry)
        return entry

    def do_HEAD(self) -> None:  # a connectivity check: whatever the path, it is up
        self.record(None)
        self.send_response(200)
        self.send_header("content-length", "0")
        self.end_headers()

    def send_json(self, status: int, payload: Any) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def send_error_json(self, entry: Recorded, status: int, message: str) -> None:
        """An error in the API's own shape (each stand-in's)."""
        raise NotImplementedError

    def model_reply(self, entry: Recorded, body: Any) -> Reply | None:
        """The script's reply to a request on a model path; None when it was answered
        already (404 off the model's paths or without a JSON object, else as `scripted`)."""
        if not self.standin.is_model_path(self.path.split("?")[0]) or not isinstance(body, dict):
            self.send_error_json(entry, 404, f"no {self.path} here")
            return None
        return self.scripted(entry, body)

    def scripted(self, entry: Recorded, body: dict[str, Any]) -> Reply | None:
        """The reply to a model request; None when it was answered with an error already
        (the scripted failure status, or a script that raised)."""
        standin = self.standin
        if standin.fail_status:
            self.send_error_json(entry, standin.fail_status, "stand-in: scripted failure")
            return None
        try:
            reply = standin.reply_for(body)
        except Exception as exc:  # a broken script must show, not hang the CLI
            standin.errors.append(f"{type(exc).__name__}: {exc}")
            self.send_error_json(entry, 400, f"stand-in: {exc}")
            return None
        entry.reply = repr(reply)
        return reply

    def start_stream(self) -> None:
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("cache-control", "no-cache")
        self.send_header("connection", "close")
        self.end_headers()

    def end_stream(self) -> None:
        self.wfile.flush()
        self.close_connection = True


@dataclass
class StandInServer:
    """`with StandIn(responder) as api:` serves on `api.url` until the block ends.

    `fail_status` answers every model request with that HTTP status instead (e.g. 401) to
    script an API failure.
    """

    responder: Responder
    side_text: str = "OK"
    fail_status: int | None = None
    requests: list[Recorded] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    port: int = 0

    Handler: ClassVar[type[RecordingHandler]]
    # Headers worth keeping in the request log, and those kept only as "present".
    logged_headers: ClassVar[tuple[str, ...]] = ()
    secret_headers: ClassVar[tuple[str, ...]] = ("authorization",)

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        handler = type("Handler", (self.Handler,), {"standin": self})
        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), handler)
        self._server.daemon_threads = True
        self.port = int(self._server.server_address[1])
        self.url = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> Self:
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
        """The agent's own turns, in order (not side queries)."""
        with self._lock:
            return [
                r
                for r in self.requests
                if self.is_model_path(r.path.split("?")[0])
                and isinstance(r.body, dict)
                and self.is_agent_loop(r.body)
            ]

    # What a stand-in decides

    def is_model_path(self, path: str) -> bool:
        """Whether a path (without its query) is one the model answers on."""
        raise NotImplementedError

    def is_agent_loop(self, body: dict[str, Any]) -> bool:
        """Whether a model request is the agent's own turn (it offers tools)."""
        raise NotImplementedError

    def side_reply(self, body: dict[str, Any]) -> Reply:
        return Text(self.side_text)

    def check(self, body: dict[str, Any], reply: ToolUse) -> None:
        """Raise when the request offers no way to make this call."""

    # Serving

    def record(self, entry: Recorded) -> None:
        with self._lock:
            self.requests.append(entry)

    def next_id(self) -> int:
        return next(self._ids)

    def reply_for(self, body: dict[str, Any]) -> Reply:
        if not self.is_agent_loop(body):
            return self.side_reply(body)
        reply = self.responder(body)
        if isinstance(reply, ToolUse):
            self.check(body, reply)
        return reply
