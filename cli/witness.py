"""`tachograph witness`: a C2SP tlog-witness for other logs, over plain HTTP.

`POST /add-checkpoint` is the whole protocol (services/witness.py); the server is the
stdlib's threaded one, since a witness answers a few requests per checkpoint of each
log it follows and needs none of the API's machinery. The witness key file is created
on first start, like the log's note key; its cosigner verifier key is printed at start.
"""

from __future__ import annotations

import argparse
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

# A checkpoint with a hundred signatures and 63 proof lines is well under this.
_MAX_BODY = 64 * 1024


def add_parser(sub: Any) -> None:
    witness = sub.add_parser("witness", help="run a C2SP tlog-witness for other logs")
    witness.add_argument("--listen", required=True, metavar="HOST:PORT")
    witness.add_argument(
        "--key",
        required=True,
        type=Path,
        metavar="FILE",
        help="the witness key (created if absent)",
    )
    witness.add_argument(
        "--log",
        action="append",
        required=True,
        metavar="ORIGIN=VERIFIERKEY",
        help="a log to witness and its note verifier key (repeatable)",
    )
    witness.add_argument(
        "--state",
        type=Path,
        metavar="FILE",
        help="the SQLite file of cosigned sizes (default: --key's path ending .state.sqlite)",
    )
    witness.set_defaults(func=cli_witness)


def cli_witness(args: argparse.Namespace) -> int:
    from domain.signed_note import NoteError, VerifierKey
    from infra.note_key import load_note_key
    from infra.settings import SettingsError
    from infra.witness_state import WitnessState
    from services.witness import Witness, parse_log_option

    host, sep, port_text = args.listen.rpartition(":")
    if not sep or not port_text.isdigit() or not 0 < int(port_text) < 65536:
        print(f"tachograph witness: --listen {args.listen!r}: expected HOST:PORT", file=sys.stderr)
        return 2
    logs: dict[str, list[VerifierKey]] = {}
    try:
        for text in args.log:
            origin, verifier = parse_log_option(text)
            logs.setdefault(origin, []).append(verifier)
        key = load_note_key(
            args.key, create=True, kind="tachograph.witness", setting="--key", cosigner=True
        )
    except (NoteError, SettingsError) as exc:
        print(f"tachograph witness: {exc}", file=sys.stderr)
        return 2
    assert key is not None  # created when absent
    # One state per key by default: two witnesses never share their cosigned sizes.
    state = WitnessState(args.state or args.key.with_suffix(".state.sqlite"))
    witness = Witness(key, logs, state)

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        # A client that stops sending mid-request frees its thread after this long.
        timeout = 30

        def do_POST(self) -> None:  # noqa: N802 (the stdlib's name)
            if self.path.rstrip("/") != "/add-checkpoint":
                self._answer(404, "text/plain", "not found\n")
                return
            length = self.headers.get("Content-Length", "")
            if not length.isdigit():
                self._answer(411, "text/plain", "Content-Length required\n")
                return
            if int(length) > _MAX_BODY:
                self._answer(413, "text/plain", f"body over {_MAX_BODY} bytes\n")
                return
            answer = witness.add_checkpoint(self.rfile.read(int(length)))
            self._answer(answer.status, answer.content_type, answer.body)

        def _answer(self, status: int, content_type: str, body: str) -> None:
            data = body.encode()
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            if status in (411, 413):
                self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
            sys.stderr.write(f"witness: {self.address_string()} {format % args}\n")

    server = ThreadingHTTPServer((host or "127.0.0.1", int(port_text)), Handler)
    print(
        f"witness {key.name} listening on {args.listen} for {len(logs)} log(s); "
        f"cosigner key {key.cosigner_verifier_key}",
        file=sys.stderr,
        flush=True,
    )
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0
