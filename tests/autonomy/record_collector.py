"""How a stand-in agent in the jail reaches the test's files: through a relayed port.

The jail covers /tmp (where the tests' files live) with an empty tmpfs, so the stand-in
can neither write nor read there. It sends one JSON request to this collector instead,
on a loopback port the cycle relays in (TACHOGRAPH_SELF_UPDATE_FORWARD), and the
collector does it outside:
- `{"path": ..., "text": ...}` appends the text to the path and answers whether the
  file existed (`1` or `0`); with `"replace": true` the text replaces the file's
  content, its directory made if need be;
- `{"path": ...}` answers the file's content, nothing if there is no such file.

The reviewing stand-in reads the script its implementing run kept this way: the jail
leaves no path the two runs share, by design.
"""

from __future__ import annotations

import functools
import json
import os
import socketserver
import threading


class _Collect(socketserver.StreamRequestHandler):
    def handle(self) -> None:
        request = json.loads(self.rfile.read())
        path = request["path"]
        if "text" not in request:
            try:
                with open(path, "rb") as kept:
                    self.wfile.write(kept.read())
            except FileNotFoundError:
                pass  # nothing kept: an empty answer
            return
        existed = os.path.exists(path)
        if request.get("replace"):
            os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w" if request.get("replace") else "a", encoding="utf-8") as out:
            out.write(request["text"])
        self.wfile.write(b"1" if existed else b"0")


@functools.cache
def collector_port() -> int:
    """The port of this process's collector, started on first use."""
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Collect)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return int(server.server_address[1])
