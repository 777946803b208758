"""`tachograph activity`: the auditor search over recorded tool calls, from the CLI."""

from __future__ import annotations

import argparse
import sys
from datetime import datetime
from typing import Any, TextIO

from bootstrap import build_services
from domain.strict_json import dumps_readable
from infra.settings import Settings
from projections.activity import ActivityQuery, search_activity
from projections.base import iso

_COLUMNS = (("at", 27), ("sessionId", 36), ("tool", 12), ("decision", 8), ("status", 11))


def _time(value: str | None, flag: str) -> str | None:
    if value is None:
        return None
    parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    if parsed.tzinfo is None:
        raise ValueError(f"{flag} needs a time zone (for example 2026-12-01T00:00:00Z)")
    return iso(parsed)


def cli_activity(settings: Settings, args: argparse.Namespace, out: TextIO) -> int:
    try:
        query = ActivityQuery(
            tool=args.tool,
            contains=args.contains,
            workspace_id=args.workspace_id,
            session_id=str(args.session_id) if args.session_id else None,
            outcome=args.outcome,
            since=_time(args.since, "--since"),
            until=_time(args.until, "--until"),
            limit=max(1, min(args.limit, 1000)),
        )
    except ValueError as exc:
        print(f"tachograph activity: {exc}", file=sys.stderr)
        return 2
    services = build_services(settings)
    try:
        services.runner.catch_up()  # what the log holds now, even with no server running
        items, _ = search_activity(services.store, query)
    finally:
        services.close()
    if args.format == "ndjson":
        for item in items:
            out.write(dumps_readable(item, separators=(",", ":")) + "\n")
        return 0
    out.write(_row({name: name for name, _ in _COLUMNS}, "summary"))
    for item in items:
        out.write(_row(item, (item["summary"] or "").replace("\n", " ")[:80]))
    return 0


def _row(item: dict[str, Any], summary: str) -> str:
    cells = [str(item[name] or "-").ljust(width) for name, width in _COLUMNS]
    return "  ".join([*cells, summary]) + "\n"
