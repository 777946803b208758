"""`tachograph policy apply|show|history|rollback|remove|init`: policy as data, from a shell.

Every command but `init` talks HTTP to a running server (`--url`, else TACHOGRAPH_URL,
else http://127.0.0.1:8000), sending TACHOGRAPH_API_KEY as its key: changing policy
needs an operator's or an admin key, reading it a reader's. `init` writes the starter
document (cli/policy_starter.yaml), which docs/policy.md explains rule by rule.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any

import httpx

STARTER = Path(__file__).with_name("policy_starter.yaml")
DEFAULT_URL = "http://127.0.0.1:8000"
DEFAULT_FILE = "policy.yaml"
TIMEOUT_S = 30.0


def add_parser(sub: Any) -> Any:
    """The `policy` command; answers its subcommands, for the ones defined elsewhere."""
    policy = sub.add_parser("policy", help="apply, show, roll back and remove policy documents")
    commands = policy.add_subparsers(dest="policy_command", required=True)

    def command(name: str, help_text: str, *, scoped: bool = False) -> argparse.ArgumentParser:
        parser: argparse.ArgumentParser = commands.add_parser(name, help=help_text)
        if scoped:
            parser.add_argument(
                "--workspace", metavar="ID", help="a workspace's scope (default: the global one)"
            )
        if name != "init":
            parser.add_argument(
                "--url", help=f"the server (default TACHOGRAPH_URL, else {DEFAULT_URL})"
            )
        return parser

    apply = command("apply", "record a document and make it active", scoped=True)
    apply.add_argument("file", type=Path, metavar="FILE", help="the document (YAML or JSON)")
    show = command("show", "the active document of each scope, or of one", scoped=True)
    show.add_argument("--json", action="store_true")
    history = command("history", "a scope's revisions and what happened to it", scoped=True)
    history.add_argument("--json", action="store_true")
    rollback = command("rollback", "make an earlier revision active again", scoped=True)
    rollback.add_argument(
        "revision", metavar="REVISION", help="its id, or its number in the scope --workspace names"
    )
    command("remove", "leave a scope with no active document", scoped=True)
    init = command("init", "write the starter document")
    init.add_argument(
        "file", nargs="?", default=DEFAULT_FILE, metavar="FILE",
        help=f"where to write it (default {DEFAULT_FILE}; - for standard output)",
    )  # fmt: skip
    init.add_argument("--force", action="store_true", help="overwrite an existing file")
    policy.set_defaults(func=lambda args: run(args, os.environ, sys.stdout, sys.stderr))
    return commands


class Refused(Exception):
    """The server answered with an error: its status and what it said."""

    def __init__(self, status: int, body: Mapping[str, Any]) -> None:
        self.status = status
        self.body = body
        super().__init__(_problem(status, body))


def run(args: argparse.Namespace, env: Mapping[str, str], out: IO[str], err: IO[str]) -> int:
    if args.policy_command == "init":
        return _init(args, out, err)
    url = (args.url or env.get("TACHOGRAPH_URL") or DEFAULT_URL).rstrip("/")
    key = env.get("TACHOGRAPH_API_KEY")
    headers = {"x-tachograph-key": key} if key else {}
    try:
        # No proxies from the environment: the key goes to the server named, nowhere else.
        with httpx.Client(base_url=url, headers=headers, timeout=TIMEOUT_S, trust_env=False) as api:
            return _COMMANDS[args.policy_command](api, args, out, err)
    except Refused as exc:
        err.write(f"tachograph policy {args.policy_command}: {exc}\n")
        return 1
    except httpx.HTTPError as exc:
        err.write(f"tachograph policy {args.policy_command}: {url}: {exc}\n")
        return 1
    except OSError as exc:
        err.write(f"tachograph policy {args.policy_command}: {exc}\n")
        return 2


def _call(api: httpx.Client, method: str, path: str, **kwargs: Any) -> Any:
    response = api.request(method, path, **kwargs)
    try:
        body = response.json()
    except ValueError:
        body = {"message": response.text[:200]}
    if response.status_code >= 400:
        raise Refused(response.status_code, body if isinstance(body, dict) else {})
    return body


def _problem(status: int, body: Mapping[str, Any]) -> str:
    """What went wrong, naming the rule when the document was refused for one."""
    message = str(body.get("message") or body.get("error") or f"HTTP {status}")
    rule = body.get("ruleId")
    if rule and body.get("problem"):
        return f"rule {rule!r}: {body['problem']} (HTTP {status})"
    return f"{message} (HTTP {status})"


def _scope(workspace: str | None) -> str:
    return f"workspace {workspace}" if workspace else "global"


def _revision_is(revision: Mapping[str, Any], state: str) -> str:
    scope = _scope(revision["workspaceId"])
    return f"revision {revision['number']} of the {scope} policy is {state}"


def _apply(api: httpx.Client, args: argparse.Namespace, out: IO[str], err: IO[str]) -> int:
    source = args.file.read_text(encoding="utf-8")
    body: dict[str, Any] = {"source": source}
    if args.workspace:
        body["workspaceId"] = args.workspace
    revision = _call(api, "POST", "/api/policy/revisions", json=body)
    active = _call(api, "POST", f"/api/policy/revisions/{revision['id']}/activate")
    out.write(f"{_revision_is(active, 'active')}: {active['id']} {active['digest']}\n")
    return 0


def _show(api: httpx.Client, args: argparse.Namespace, out: IO[str], err: IO[str]) -> int:
    items = _call(api, "GET", "/api/policy")["items"]
    if args.workspace:
        items = [i for i in items if i["workspaceId"] == args.workspace]
    if args.json:
        out.write(json.dumps(items, indent=2) + "\n")
        return 0
    if not items:
        err.write(f"no active policy ({_scope(args.workspace)})\n")
        return 0
    for item in items:
        out.write(
            f"# {_scope(item['workspaceId'])}: revision {item['number']} {item['id']} "
            f"{item['digest']}, activated by {item['activatedBy']} at {item['activatedAt']}\n"
        )
        out.write(item["source"].rstrip("\n") + "\n")
    return 0


def _history(api: httpx.Client, args: argparse.Namespace, out: IO[str], err: IO[str]) -> int:
    params = {"workspaceId": args.workspace} if args.workspace else {}
    listed = _call(api, "GET", "/api/policy/revisions", params=params)
    if args.json:
        out.write(json.dumps(listed, indent=2) + "\n")
        return 0
    rows = [("number", "id", "digest", "mode", "actor", "recorded", "active")]
    rows += [
        (
            str(r["number"]),
            r["id"],
            r["digest"][:19],
            r["mode"],
            r["actor"],
            _short(r["recordedAt"]),
            "active" if r["active"] else "",
        )
        for r in listed["items"]
    ]
    out.write(_table(rows))
    numbers = {r["id"]: r["number"] for r in listed["items"]}
    out.write("\n")
    changes = [("at", "change", "revision", "actor")]
    changes += [
        (_short(h["at"]), h["change"], str(numbers.get(h["revisionId"], "-")), h["actor"])
        for h in listed["history"]
    ]
    out.write(_table(changes))
    return 0


def _rollback(api: httpx.Client, args: argparse.Namespace, out: IO[str], err: IO[str]) -> int:
    revision_id = args.revision
    if revision_id.isdigit():
        params = {"workspaceId": args.workspace} if args.workspace else {}
        listed = _call(api, "GET", "/api/policy/revisions", params=params)["items"]
        found = [r["id"] for r in listed if r["number"] == int(revision_id)]
        if not found:
            err.write(f"tachograph policy rollback: no revision {revision_id} in that scope\n")
            return 2
        revision_id = found[0]
    active = _call(api, "POST", f"/api/policy/revisions/{revision_id}/rollback")
    out.write(f"rolled back: {_revision_is(active, 'active again')} ({active['digest']})\n")
    return 0


def _remove(api: httpx.Client, args: argparse.Namespace, out: IO[str], err: IO[str]) -> int:
    body = {"workspaceId": args.workspace} if args.workspace else {}
    _call(api, "POST", "/api/policy/remove", json=body)
    out.write(f"the {_scope(args.workspace)} policy is removed: no rule of it judges calls\n")
    return 0


def _init(args: argparse.Namespace, out: IO[str], err: IO[str]) -> int:
    starter = STARTER.read_text(encoding="utf-8")
    if args.file == "-":
        out.write(starter)
        return 0
    target = Path(args.file)
    if target.exists() and not args.force:
        err.write(f"tachograph policy init: {target} exists (--force overwrites it)\n")
        return 1
    target.write_text(starter, encoding="utf-8")
    err.write(f"wrote {target}: try it, then `tachograph policy apply {target}`\n")
    return 0


def _table(rows: Sequence[tuple[str, ...]]) -> str:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "".join(
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() + "\n"
        for row in rows
    )


def _short(at: str | None) -> str:
    return at[:16].replace("T", " ") if at else "-"


_COMMANDS = {
    "apply": _apply,
    "show": _show,
    "history": _history,
    "rollback": _rollback,
    "remove": _remove,
}
