"""`tachograph usage`: model usage the runtimes reported, summed, as GET /api/usage."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any, TextIO

from cli.cli_values import TIME_FORMS, BadValue
from cli.log_presence import add_data_dir_option

# GET /api/usage's groupBy values (projections/usage.py GROUPINGS; the parser is built
# without importing the stores).
GROUP_BY = ("session", "workspace", "agent", "model", "day")

_FIGURES = (
    ("requests", 8),
    ("inputTokens", 12),
    ("outputTokens", 12),
    ("cacheReadTokens", 15),
    ("cacheCreationTokens", 19),
    ("costUsd", 12),
)


def add_usage_parser(sub: Any, settings_of: Callable[[argparse.Namespace], Any]) -> None:
    """`tachograph usage`, reading the log `settings_of` the arguments name."""
    usage = sub.add_parser("usage", help="model requests, tokens and cost the agents reported")
    usage.add_argument("--group-by", choices=GROUP_BY, default="session")
    usage.add_argument("--workspace", dest="workspace_id")
    usage.add_argument("--since", help=f"requests at or after: {TIME_FORMS}")
    usage.add_argument("--until", help=f"requests before: {TIME_FORMS}")
    usage.add_argument("--format", choices=["table", "ndjson"], default="table")
    add_data_dir_option(usage)
    usage.set_defaults(func=lambda args: cli_usage(settings_of(args), args, sys.stdout))


def cli_usage(settings: Any, args: argparse.Namespace, out: TextIO) -> int:
    """GET /api/usage's sums, as a table or NDJSON."""
    from bootstrap import build_services
    from cli.activity import recorded_time
    from domain.strict_json import dumps_readable
    from projections.usage import usage_by

    try:
        since = recorded_time(args.since, "--since")
        until = recorded_time(args.until, "--until")
    except BadValue as exc:
        print(f"tachograph usage: {exc}", file=sys.stderr)
        return 2
    services = build_services(settings, reading=True)
    try:
        services.runner.catch_up()  # what the log holds now, even with no server running
        items = usage_by(
            services.store,
            args.group_by,
            since=since,
            until=until,
            workspace=args.workspace_id,
        )
    finally:
        services.close()
    if args.format == "ndjson":
        for item in items:
            out.write(dumps_readable(item, separators=(",", ":")) + "\n")
        return 0
    out.write(_row({"key": args.group_by, **{name: name for name, _ in _FIGURES}}))
    for item in items:
        out.write(_row({**item, "costUsd": f"{item['costUsd']:.6f}"}))
    return 0


def _row(item: dict[str, Any]) -> str:
    cells = [str(item["key"] if item["key"] is not None else "-").ljust(36)]
    cells += [str(item[name]).rjust(width) for name, width in _FIGURES]
    return "  ".join(cells) + "\n"
