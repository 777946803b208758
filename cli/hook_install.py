"""`tachograph hook install|uninstall <runtime> <dir>`: Tachograph's hooks in, or out of,
each runtime's own configuration (its hook file, hook scripts or plugin)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

# `tachograph hook <runtime>`: relayed by hook_client.command (ingest/runtimes/runtimes.py).
COMMAND_HOOK_RUNTIMES = ("claude", "codex", "gemini", "copilot", "qwen", "droid", "cline")
# Runtimes whose hook is a plugin Tachograph writes (cli/opencode_plugin.py), not a command.
PLUGIN_HOOK_RUNTIMES = ("opencode", "kilo")


def cmd_hook_install(args: argparse.Namespace) -> int:
    """Merge Tachograph's hooks into a runtime's hook file in <dir>."""
    import os

    from cli.hook_files import HookFileError
    from cli.hook_waits import UNKNOWN_HOLD_S, server_hold_s

    url = args.url or os.environ.get("TACHOGRAPH_URL") or "http://127.0.0.1:8000"
    hold = server_hold_s(url, os.environ)
    if hold is None:
        # Hooks that wait too little run held calls undecided; waiting longer costs
        # nothing unless a call is held. Reinstall once the server answers to shorten.
        hold = UNKNOWN_HOLD_S
        print(
            f"tachograph: could not read longestHoldS from {url}/api/health; held events' "
            f"hooks wait for the longest hold a rule may set ({hold} s)",
            file=sys.stderr,
        )
    try:
        if args.agent == "claude":
            from cli.claude_settings import install_claude_hooks

            path = install_claude_hooks(
                Path(args.dir),
                http=args.http,
                url=url,
                fail_closed=args.fail_closed,
                hold_s=hold,
            )
        elif args.agent in PLUGIN_HOOK_RUNTIMES:
            from cli.opencode_plugin import PLUGIN_RUNTIMES, install_plugin

            if args.http:
                raise HookFileError(f"{args.agent} runs Tachograph's plugin; drop --http")
            path, note = install_plugin(
                PLUGIN_RUNTIMES[args.agent],
                Path(args.dir),
                url=url,
                fail_closed=args.fail_closed,
                hold_s=hold,
            )
            if note:
                print(note)
        elif args.agent == "copilot":
            from cli.copilot_hooks import install_copilot_hooks, install_note

            path = install_copilot_hooks(
                Path(args.dir),
                http=args.http,
                url=url,
                fail_closed=args.fail_closed,
                hold_s=hold,
            )
            if note := install_note(http=args.http, url=url):
                print(note)
        elif args.agent == "cline":
            path = _install_cline(args, url, hold)
        else:
            from cli.runtime_hooks import install_nested, nested_spec

            if args.http:
                raise HookFileError(f"{args.agent} runs command hooks only; drop --http")
            path = install_nested(
                nested_spec(args.agent, os.environ),
                Path(args.dir),
                url=url,
                fail_closed=args.fail_closed,
                hold_s=hold,
            )
    except HookFileError as exc:
        print(f"tachograph: {exc}", file=sys.stderr)
        return 1
    print(f"installed Tachograph hooks in {path}")
    return 0


def _install_cline(args: argparse.Namespace, url: str, hold: int) -> Path:
    """Cline's hook files (cli/cline_hooks.py), saying when a hold outlasts Cline's wait."""
    from cli.cline_hooks import install_cline_hooks, install_note
    from cli.hook_files import HookFileError

    if args.http:
        raise HookFileError("cline runs command hooks only; drop --http")
    path = install_cline_hooks(Path(args.dir), url=url, fail_closed=args.fail_closed, hold_s=hold)
    if note := install_note(hold):
        print(note, file=sys.stderr)
    return path


def cmd_hook_uninstall(args: argparse.Namespace) -> int:
    """Remove exactly Tachograph's hooks from a runtime's hook file in <dir>."""
    from cli.hook_files import HookFileError

    try:
        if args.agent == "claude":
            from cli.claude_settings import uninstall_claude_hooks

            path = uninstall_claude_hooks(Path(args.dir))
        elif args.agent in PLUGIN_HOOK_RUNTIMES:
            from cli.opencode_plugin import PLUGIN_RUNTIMES, uninstall_plugin

            path = uninstall_plugin(PLUGIN_RUNTIMES[args.agent], Path(args.dir))
        elif args.agent == "copilot":
            from cli.copilot_hooks import uninstall_copilot_hooks

            path = uninstall_copilot_hooks(Path(args.dir))
        elif args.agent == "cline":
            from cli.cline_hooks import uninstall_cline_hooks

            path = uninstall_cline_hooks(Path(args.dir))
        else:
            from cli.runtime_hooks import NESTED, uninstall_nested

            path = uninstall_nested(NESTED[args.agent], Path(args.dir))
    except HookFileError as exc:
        print(f"tachograph: {exc}", file=sys.stderr)
        return 1
    print(f"removed Tachograph hooks from {path}")
    return 0
