"""A stand-in self-update agent whose behaviour the task's prompt scripts.

The cycle runs it twice: first with the task's prompt, a JSON script
`{"implement": ..., "review": ..., "checkout": PATH?, "record": PATH?}`, then with the
review prompt (which carries the patch and its digest). It works in its current
directory, the clone, as a real agent would. `record` collects what it saw there.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

SCRIPT_FILE = ".self-update-script.json"  # kept in the clone's .git, so never committed


def git(*args: str) -> str:
    done = subprocess.run(["git", *args], capture_output=True, text=True, check=True)
    return done.stdout


def say(text: str) -> None:
    print(json.dumps({"type": "result", "result": text}), flush=True)


def note(script: dict[str, str], what: dict[str, object]) -> None:
    if script.get("record"):
        with open(script["record"], "a", encoding="utf-8") as out:
            out.write(json.dumps(what) + "\n")


def implement(script: dict[str, str]) -> int:
    here = Path.cwd()
    note(
        script,
        {
            "phase": "implement",
            "cwd": str(here),
            "env": sorted(os.environ),
            "home": os.environ.get("HOME"),
            "branch": git("rev-parse", "--abbrev-ref", "HEAD").strip(),
            "remotes": git("remote").split(),
        },
    )
    how = script["implement"]
    if script.get("sleep_first") and script.get("record"):
        marker = Path(script["record"] + ".slept")
        if not marker.exists():  # only the first attempt hangs (until its worker is killed)
            marker.write_text("")
            time.sleep(float(script["sleep_first"]))
    if how == "noop":
        say("Nothing needed changing.")
        return 0
    if how == "escape":
        note(script, {"phase": "escape", "probes": escape(script)})
    if how == "fail":
        print("invalid argument: cannot work here", file=sys.stderr)
        return 2
    (here / "CHANGELOG.md").write_text("- tidy the docs\n")
    if how == "dirty":
        say("Left it uncommitted.")
        return 0
    git("add", "-A")
    git("commit", "-q", "-m", "Tidy the docs")
    if how == "remote-change":
        # Someone changes the registered checkout's remotes while the cycle runs.
        subprocess.run(
            ["git", "-C", script["checkout"], "remote", "add", "late", "/nowhere"], check=True
        )
    say("Added a changelog entry.")
    return 0


def escape(script: dict[str, str]) -> dict[str, str]:
    """What a process of the agent's own (not a reported tool call) can reach from here."""

    def attempt(action: Callable[[], object]) -> str:
        try:
            action()
        except OSError as exc:
            return f"refused: {type(exc).__name__}"
        return "reached"

    def tcp(port: int) -> None:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()

    def unix(path: str) -> None:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(2)
            s.connect(path)

    checkout = Path(script["checkout"])
    return {
        "writeCheckout": attempt(lambda: (checkout / "ESCAPED.md").write_text("x")),
        "readStore": attempt(lambda: Path(script["store"]).read_bytes()),
        "postgresTcp": attempt(lambda: tcp(5432)),
        "postgresSocket": attempt(lambda: unix("/run/postgresql/.s.PGSQL.5432")),
        "outsideAddress": attempt(lambda: socket.create_connection(("192.0.2.1", 80), 2)),
        "writeNextToClone": attempt(lambda: (Path.cwd().parent / "outside.txt").write_text("x")),
        "interfaces": ",".join(sorted(name for _, name in socket.if_nameindex())),
    }


def review(script: dict[str, str], prompt: str) -> int:
    digest = re.search(r"\(SHA-256 (\S+)\)", prompt)
    note(script, {"phase": "review", "digest": digest.group(1) if digest else None})
    how = script["review"]
    if how == "reject" or digest is None:
        say("Looks wrong.\nREJECT: the change is not needed")
        return 0
    if how == "wrong-digest":
        say("Fine.\nAPPROVE sha256:" + "0" * 64)
        return 0
    if how == "tamper":
        # Approve, then change the clone: the commit phase must notice.
        Path("CHANGELOG.md").write_text("- something else\n")
        git("commit", "-q", "-a", "--amend", "-m", "Tidy the docs")
    say(f"Small and safe.\nAPPROVE {digest.group(1)}")
    return 0


def main() -> int:
    prompt = sys.argv[1]
    state = Path(git("rev-parse", "--git-dir").strip()) / SCRIPT_FILE
    if prompt.startswith("{"):
        state.write_text(prompt)
        return implement(json.loads(prompt))
    return review(json.loads(state.read_text()), prompt)


if __name__ == "__main__":
    raise SystemExit(main())
