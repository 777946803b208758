"""How a stand-in agent in the jail writes down what it saw: through a relayed port.

The jail covers /tmp (where the tests' files live) with an empty tmpfs, so the stand-in
cannot write there. It sends `{"path": ..., "text": ...}` to this collector instead, on a
loopback port the cycle relays in (TACHOGRAPH_SELF_UPDATE_FORWARD), and the collector
appends the text to the path, outside, before it answers whether the file existed.
"""

from __future__ import annotations

import functools
import json
import os
import socketserver
import threading


class _Append(socketserver.StreamRequestHandler):
    def handle(self) -> None:
        note = json.loads(self.rfile.read())
        existed = os.path.exists(note["path"])
        with open(note["path"], "a", encoding="utf-8") as out:
            out.write(note["text"])
        self.wfile.write(b"1" if existed else b"0")


@functools.cache
def collector_port() -> int:
    """The port of this process's collector, started on first use."""
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Append)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return int(server.server_address[1])
