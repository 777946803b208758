"""`tachograph export --session ID [--out FILE | --bundle FILE]`: one session's events.

`--out` writes them as NDJSON with their chain links; `--bundle` as an offline evidence
bundle, each event with its Merkle inclusion proof (services/log_bundle.py).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from infra.settings import Settings


def cli_export_session(settings: Settings, typed: str, out_path: str | None) -> int:
    """One session's events with their positions, chain links and stored payloads."""
    from contextlib import ExitStack

    from fastapi.encoders import jsonable_encoder

    from bootstrap import build_services
    from cli.cli_values import BadValue, resolve_session
    from domain.strict_json import dumps_readable
    from projections.sessions import session_ids_starting
    from services.session_export import session_export

    services = build_services(settings, reading=True)
    with ExitStack() as stack:
        stack.callback(services.close)
        services.runner.catch_up()  # the chain's read model holds every link exported
        known = session_ids_starting(services.store, typed.strip().lower())
        try:
            session_id = resolve_session(typed, "--session", known)
        except BadValue as exc:
            print(f"tachograph export: {exc}", file=sys.stderr)
            return 2
        records = session_export(services.app, services.store, session_id)
        if not records:
            print(f"session {session_id} has no events", file=sys.stderr)
            return 1
        out = stack.enter_context(open(out_path, "w", encoding="utf-8")) if out_path else sys.stdout
        for record in jsonable_encoder(records):
            out.write(dumps_readable(record, separators=(",", ":")) + "\n")
    print(f"exported {len(records)} events of session {session_id}", file=sys.stderr)
    return 0


def cli_export_bundle(settings: Settings, typed: str | None, path: str) -> int:
    """`tachograph export --session ID --bundle FILE`."""
    from contextlib import ExitStack

    from bootstrap import build_services
    from cli.cli_values import BadValue, resolve_session
    from projections.log_tree import sign_log_head
    from projections.sessions import session_ids_starting
    from services.log_bundle import BundleError, build_bundle

    if typed is None:
        print("tachograph export: --bundle needs --session", file=sys.stderr)
        return 2
    services = build_services(settings, reading=True)
    with ExitStack() as stack:
        stack.callback(services.close)
        services.runner.catch_up()  # every event of the session is a leaf of the tree
        known = session_ids_starting(services.store, typed.strip().lower())
        try:
            session_id = resolve_session(typed, "--session", known)
            bundle = build_bundle(
                services.app,
                services.store,
                session_id,
                lambda: sign_log_head(services.projections, services.store),
            )
        except (BadValue, BundleError) as exc:
            print(f"tachograph export: {exc}", file=sys.stderr)
            return 2 if isinstance(exc, BadValue) else 1
    Path(path).write_text(json.dumps(bundle, indent=1) + "\n", encoding="utf-8")
    print(
        f"bundled {len(bundle['events'])} events of session {session_id} "
        f"against the signed tree of size {bundle['checkpoint'].split(chr(10))[1]}",
        file=sys.stderr,
    )
    return 0
