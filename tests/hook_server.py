"""A loopback HTTP hook handler for tests: each path answers with a scripted behaviour."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Behaviour = Callable[[dict[str, Any]], tuple[int, Any]]


def _not_found(_: dict[str, Any]) -> tuple[int, Any]:
    return 404, {}


class HookServer:
    """Records every request body; `routes[path]` decides each answer."""

    def __init__(self) -> None:
        self.routes: dict[str, Behaviour] = {}
        self.delays: dict[str, float] = {}
        self.requests: list[tuple[str, dict[str, Any], dict[str, str]]] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's naming
                length = int(self.headers.get("content-length", "0"))
                body = json.loads(self.rfile.read(length) or b"{}")
                server.requests.append((self.path, body, dict(self.headers.items())))
                time.sleep(server.delays.get(self.path, 0))
                status, answer = server.routes.get(self.path, _not_found)(body)
                payload = json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args: Any) -> None:
                pass

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._httpd.server_address[1]}"
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)
        self._thread.start()

    def bodies(self, path: str) -> list[dict[str, Any]]:
        return [body for p, body, _ in self.requests if p == path]

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()


def answer(outcome: str, **extra: Any) -> Behaviour:
    return lambda _: (200, {"schemaVersion": 1, "outcome": outcome, **extra})
