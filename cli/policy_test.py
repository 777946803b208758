"""`tachograph policy test FILE`: a candidate document tried against the recorded calls.

The same backtest as `POST /api/policy/backtest` (docs/policy.md, "Backtests"), run on
the configured store; recorded as run by `cli:<login>`.
"""

from __future__ import annotations

import argparse
import getpass
import json
import sys
from pathlib import Path
from typing import Any, TextIO

from cli.cli_values import TIME_FORMS, BadValue, parse_when
from cli.log_presence import add_data_dir_option
from domain.errors import NotFound, RuleViolation
from infra.settings import Settings

_EXAMPLES_SHOWN = 3


def add_test_parser(policy_commands: Any) -> argparse.ArgumentParser:
    """`policy test` under the `policy` command's subcommands."""
    test: argparse.ArgumentParser = policy_commands.add_parser(
        "test", help="try a policy document against the recorded calls (a backtest)"
    )
    test.add_argument("file", type=Path, help="the candidate document (YAML or JSON)")
    test.add_argument("--since", default="30d", help=f"calls at or after: {TIME_FORMS}")
    test.add_argument("--until", help=f"calls before: {TIME_FORMS}")
    test.add_argument("--workspace", dest="workspace_id", help="only this workspace's calls")
    test.add_argument("--json", action="store_true", help="the report as JSON")
    add_data_dir_option(test)
    return test


def cli_policy_test(settings: Settings, args: argparse.Namespace, out: TextIO) -> int:
    try:
        source = args.file.read_text(encoding="utf-8")
        since = parse_when(args.since, "--since") if args.since else None
        until = parse_when(args.until, "--until") if args.until else None
    except (OSError, UnicodeDecodeError) as exc:
        print(f"tachograph policy test: cannot read {args.file}: {exc}", file=sys.stderr)
        return 2
    except BadValue as exc:
        print(f"tachograph policy test: {exc}", file=sys.stderr)
        return 2
    from bootstrap import build_services
    from services.policy_backtest import run_backtest

    services = build_services(settings)
    try:
        services.runner.catch_up()  # the sessions' workspaces as the log has them now
        report = run_backtest(
            services.app,
            services.store,
            source,
            since=since,
            until=until,
            workspace_id=args.workspace_id,
            actor=f"cli:{_login()}",
        )
    except (RuleViolation, NotFound) as exc:
        print(f"tachograph policy test: {exc}", file=sys.stderr)
        return 2
    finally:
        services.close()
    if args.json:
        out.write(json.dumps(report, indent=2) + "\n")
    else:
        out.write(_summary(report))
    return 0


def _summary(report: dict[str, Any]) -> str:
    changed = report["changed"]
    lines = [
        f"{report['evaluated']} calls judged, {report['unjudged']} could not be "
        f"(their recorded facts were cut), in {report['seconds']} s",
        f"the candidate would deny {changed['deny']}, ask about {changed['ask']} and add "
        f"context to {changed['context']} calls that were not so decided",
        "",
        f"{'rule':<32} {'then':<8} {'mode':<8} {'hits':>8}",
    ]
    for rule in report["rules"]:
        lines.append(f"{rule['id']:<32} {rule['then']:<8} {rule['mode']:<8} {rule['hits']:>8}")
        for example in rule["examples"][-_EXAMPLES_SHOWN:]:
            summary = (example["summary"] or "").replace("\n", " ")[:70]
            lines.append(
                f"    #{example['position']} {example['sessionId'][:8]} "
                f"({example['decision']}) {summary}"
            )
    return "\n".join(lines) + "\n"


def _login() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "unknown"
