"""`tachograph keys issue|list|revoke`: credentials from the server's own shell.

Whoever runs it holds the database, so it acts as an administrator; its events name
the actor `cli:<login>`. It projects what it appended before it returns, so a key it
prints is usable on every running replica straight away.
"""

from __future__ import annotations

import argparse
import getpass
import json
from typing import IO, Any

from cli.cli_values import resolve_session
from cli.log_presence import add_data_dir_option
from domain.credentials import AGENT, ROLES, Binding, parse_lifetime
from domain.errors import DomainError, NotFound
from infra.settings import Settings
from projections.sessions import session_ids_starting

COLUMNS = ("label", "role", "bound to", "created", "expires", "last used", "revoked")


def add_parser(sub: Any) -> None:
    keys = sub.add_parser("keys", help="issue, list and revoke API credentials")
    keys_sub = keys.add_subparsers(dest="keys_command", required=True)
    issue = keys_sub.add_parser("issue", help="issue a key; its secret is printed once")
    issue.add_argument("--role", required=True, choices=ROLES)
    issue.add_argument("--label", help="unique name (made up for agent tokens when left out)")
    issue.add_argument("--expires", metavar="DURATION", help="e.g. 30d, 12h, 15m")
    bound = issue.add_mutually_exclusive_group()
    bound.add_argument("--session", metavar="ID", help="agent token: this session only")
    bound.add_argument("--workspace", metavar="ID", help="agent token: this workspace's sessions")
    listing = keys_sub.add_parser("list", help="every key: role, created, expires, last used")
    listing.add_argument("--json", action="store_true")
    add_data_dir_option(listing)
    revoke = keys_sub.add_parser("revoke", help="revoke a key on every replica")
    revoke.add_argument("label", help="the key's label, or its id")
    revoke.add_argument("--reason")


def run(args: argparse.Namespace, settings: Settings, out: IO[str], err: IO[str]) -> int:
    from api.routes.keys import agent_label
    from bootstrap import build_services
    from projections.api_keys import list_keys

    actor = f"cli:{_login()}"
    services = build_services(settings, reading=args.keys_command == "list")
    try:
        if args.keys_command == "list":
            services.runner.catch_up()
            rows = list_keys(services.store, 200)
            out.write(json.dumps(rows, indent=2) + "\n" if args.json else _table(rows))
            return 0
        try:
            if args.keys_command == "issue":
                if args.label is None and args.role != AGENT:
                    err.write("tachograph: --label is required for this role\n")
                    return 2
                issued = services.keys.issue(
                    args.label or agent_label(),
                    args.role,
                    actor,
                    lifetime=parse_lifetime(args.expires) if args.expires else None,
                    binding=Binding(
                        session_id=_session(services, args.session), workspace_id=args.workspace
                    ),
                )
                services.runner.catch_up()
                expires = (
                    f", expires {issued.expires_at:%Y-%m-%d %H:%M} UTC" if issued.expires_at else ""
                )
                err.write(
                    f"issued {issued.role} key {issued.label!r}{expires}; "
                    "its secret is shown this once:\n"
                )
                out.write(issued.secret + "\n")
                return 0
            label = _revoke(services, args.label, actor, args.reason)
            services.runner.catch_up()
            out.write(f"revoked {label!r}\n")
            return 0
        except (DomainError, ValueError) as exc:
            err.write(f"tachograph: {getattr(exc, 'message', exc)}\n")
            return 1
    finally:
        services.close()


def _session(services: Any, typed: str | None) -> str | None:
    """The session a token is bound to: its id, or the start of one the page shows."""
    if typed is None:
        return None
    services.runner.catch_up()
    known = session_ids_starting(services.store, typed.strip().lower())
    return str(resolve_session(typed, "--session", known))


def _revoke(services: Any, typed: str, actor: str, reason: str | None) -> str:
    """Revoke the key labelled `typed`, or else the one with that id; return its label."""
    from projections.api_keys import key_label_with_id

    try:
        services.keys.revoke(typed, actor, reason)
        return typed
    except NotFound:
        services.runner.catch_up()
        label = key_label_with_id(services.store, typed.strip().lower())
        if label is None:
            raise NotFound(f"no key labelled or with id {typed!r}") from None
    services.keys.revoke(label, actor, reason)
    return label


def _login() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "unknown"


def _table(rows: list[dict[str, Any]]) -> str:
    lines = [COLUMNS]
    for r in rows:
        bound = (
            r["sessionId"]
            and f"session {r['sessionId']}"
            or (r["workspaceId"] and f"workspace {r['workspaceId']}")
            or "-"
        )
        lines.append(
            (
                r["label"],
                r["role"],
                bound,
                _short(r["createdAt"]),
                _short(r["expiresAt"]),
                _short(r["lastUsedAt"]),
                _short(r["revokedAt"]),
            )
        )
    widths = [max(len(line[i]) for line in lines) for i in range(len(COLUMNS))]
    return "".join(
        "  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip() + "\n"
        for line in lines
    )


def _short(at: str | None) -> str:
    return at[:16].replace("T", " ") if at else "-"
