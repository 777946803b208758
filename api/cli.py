"""The `tachograph` command. Imports are lazy so `tachograph hook ...` stays lean."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any


def _settings() -> Any:
    from infra.settings import Settings, SettingsError

    try:
        return Settings.from_env()
    except SettingsError as exc:
        print(f"tachograph: configuration error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None


def cmd_serve(args: argparse.Namespace) -> int:
    """API, projections and scheduler in one process."""
    import uvicorn

    from api.app import create_app
    from infra.logs import configure_logging

    import signal

    settings = _settings()
    configure_logging()
    app = create_app(settings)
    # uvicorn shuts down gracefully on SIGTERM/SIGINT, then re-raises the signal to the
    # previous handler; a no-op one lets a clean shutdown end with exit status 0.
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: None)
    uvicorn.run(app, host=args.host, port=args.port, log_config=None, access_log=False)
    return 0


def cmd_worker(args: argparse.Namespace) -> int:
    """Projections and scheduler without HTTP, until SIGTERM or SIGINT."""
    import signal
    import threading

    from api.bootstrap import build_services
    from infra.logs import configure_logging

    settings = _settings()
    configure_logging()
    services = build_services(settings)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    services.start()
    print("tachograph worker started", file=sys.stderr, flush=True)
    stop.wait()
    services.stop()
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    """Write the ordered log as NDJSON."""
    import json

    from fastapi.encoders import jsonable_encoder

    from infra.event_store import open_application
    from infra.log_reader import event_record, iter_events

    settings = _settings()
    app = open_application(settings)
    out = open(args.out, "w", encoding="utf-8") if args.out else sys.stdout
    count = 0
    try:
        for n in iter_events(app, after=args.after):
            out.write(json.dumps(jsonable_encoder(event_record(app, n)), separators=(",", ":")))
            out.write("\n")
            count += 1
    finally:
        if args.out:
            out.close()
        app.close()
    print(f"exported {count} events", file=sys.stderr)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tachograph", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="run the API, projections and scheduler")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8000)
    serve.set_defaults(func=cmd_serve)

    worker = sub.add_parser("worker", help="run projections and the scheduler without HTTP")
    worker.set_defaults(func=cmd_worker)

    export = sub.add_parser("export", help="write the log as NDJSON")
    export.add_argument("--after", type=int, default=0)
    export.add_argument("--out")
    export.set_defaults(func=cmd_export)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    raise SystemExit(main())
