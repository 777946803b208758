"""`tachograph activity`: the auditor search over recorded tool calls, from the CLI."""

from __future__ import annotations

import argparse
import sys
from typing import Any, TextIO

from bootstrap import build_services
from cli.cli_values import BadValue, parse_when, resolve_session
from domain.strict_json import dumps_readable
from infra.settings import Settings
from projections.activity import ActivityQuery, search_activity
from projections.base import iso
from projections.decided_by import label
from projections.session_titles import with_session_titles
from projections.sessions import session_ids_starting

_COLUMNS = (
    ("at", 27),
    ("sessionId", 36),
    ("tool", 12),
    ("decision", 8),
    ("status", 11),
    ("decidedBy", 24),
)


def recorded_time(value: str | None, flag: str) -> str | None:
    """A time flag's value as the read models store times (None when not given)."""
    return None if value is None else iso(parse_when(value, flag))


def cli_activity(settings: Settings, args: argparse.Namespace, out: TextIO) -> int:
    try:
        since = recorded_time(args.since, "--since")
        until = recorded_time(args.until, "--until")
    except BadValue as exc:
        print(f"tachograph activity: {exc}", file=sys.stderr)
        return 2
    services = build_services(settings, reading=True)
    try:
        services.runner.catch_up()  # what the log holds now, even with no server running
        session_id = None
        if args.session_id is not None:
            known = session_ids_starting(services.store, args.session_id.strip().lower())
            session_id = str(resolve_session(args.session_id, "--session", known))
        query = ActivityQuery(
            tool=args.tool,
            contains=args.contains,
            workspace_id=args.workspace_id,
            session_id=session_id,
            outcome=args.outcome,
            rule_id=args.rule_id,
            policy_mode=args.policy_mode,
            since=since,
            until=until,
            limit=max(1, min(args.limit, 1000)),
        )
        items, _ = search_activity(services.store, query)
        with_session_titles(services.store, items)  # as GET /api/activity answers
    except (BadValue, ValueError) as exc:
        print(f"tachograph activity: {exc}", file=sys.stderr)
        return 2
    finally:
        services.close()
    if args.format == "ndjson":
        for item in items:
            out.write(dumps_readable(item, separators=(",", ":")) + "\n")
        return 0
    out.write(_row({name: name for name, _ in _COLUMNS}, "summary"))
    for item in items:
        shown = {**item, "decidedBy": label(item["decidedBy"])}
        out.write(_row(shown, (item["summary"] or "").replace("\n", " ")[:80]))
    return 0


def _row(item: dict[str, Any], summary: str) -> str:
    cells = [str(item[name] or "-").ljust(width) for name, width in _COLUMNS]
    return "  ".join([*cells, summary]) + "\n"
