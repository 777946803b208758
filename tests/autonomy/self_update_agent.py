"""A stand-in self-update agent whose behaviour the task's prompt scripts.

The cycle runs it twice: first with the task's prompt, a JSON script
`{"implement": ..., "review": ..., "checkout": PATH?, "record": PATH?}`, then with the
review prompt (which carries the patch and its digest). It works in its current
directory, the clone, as a real agent would. `record` collects what it saw there.
`--escape SCRIPT` runs only the escape attempts and prints what they reached.
"""

from __future__ import annotations

import json
import os
import re
import shutil
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
        deliver(script, script["record"], json.dumps(what) + "\n")


def deliver(script: dict[str, str], path: str, text: str) -> bool:
    """Append to a file of the test's, through its collector when there is one (the jail
    hides the test's files: tests/autonomy/record_collector.py). Whether it existed."""
    if not script.get("collector"):
        existed = os.path.exists(path)
        with open(path, "a", encoding="utf-8") as out:
            out.write(text)
        return existed
    with socket.create_connection(("127.0.0.1", int(script["collector"])), 10) as s:
        s.sendall(json.dumps({"path": path, "text": text}).encode())
        s.shutdown(socket.SHUT_WR)
        return s.recv(1) == b"1"  # written


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
    # Only the first attempt hangs (until its worker is killed): the marker did not exist.
    marker = script["record"] + ".slept" if script.get("record") else None
    if script.get("sleep_first") and marker and not deliver(script, marker, ""):
        time.sleep(float(script["sleep_first"]))
    if how == "noop":
        say("Nothing needed changing.")
        return 0
    if how == "escape":
        note(script, {"phase": "escape", "probes": escape(script)})
    if how == "linger":  # a child that leaves the process group, then wait to be stopped
        quiet = subprocess.DEVNULL
        subprocess.Popen(
            ["sleep", script["linger"]], start_new_session=True, stdout=quiet, stderr=quiet
        )
        note(script, {"phase": "lingering"})
        time.sleep(300)
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

    def command(*argv: str) -> None:
        if shutil.which(argv[0]) is None:  # a missing tool is no refusal
            raise RuntimeError(f"{argv[0]} is not installed")
        done = subprocess.run(argv, capture_output=True, timeout=10)
        if done.returncode != 0:
            raise OSError(f"{argv[0]} exited {done.returncode}")

    checkout = Path(script["checkout"])
    probes = {
        "writeCheckout": attempt(lambda: (checkout / "ESCAPED.md").write_text("x")),
        "readStore": attempt(lambda: Path(script["store"]).read_bytes()),
        "postgresTcp": attempt(lambda: tcp(5432)),
        "postgresSocket": attempt(lambda: unix("/run/postgresql/.s.PGSQL.5432")),
        "postgresVarRunSocket": attempt(lambda: unix("/var/run/postgresql/.s.PGSQL.5432")),
        "outsideAddress": attempt(lambda: socket.create_connection(("192.0.2.1", 80), 2)),
        "writeNextToClone": attempt(lambda: (Path.cwd().parent / "outside.txt").write_text("x")),
        "interfaces": ",".join(sorted(name for _, name in socket.if_nameindex())),
    }
    if "outside_pid" not in script:
        return probes
    # A process outside (the server, a bystander of the same user): its environment, the
    # checkout through its root, its network namespace, a signal to it.
    outside, server = script["outside_pid"], script["server_pid"]
    probes.update(
        readServerEnviron=attempt(lambda: Path(f"/proc/{server}/environ").read_bytes()),
        readOutsideEnviron=attempt(lambda: Path(f"/proc/{outside}/environ").read_bytes()),
        listCheckoutThroughProc=attempt(lambda: os.listdir(f"/proc/{server}/root{checkout}")),
        nsenterHostNetwork=attempt(
            lambda: command("nsenter", f"--net=/proc/{outside}/ns/net", "true")
        ),
        unmountHidden=attempt(lambda: command("umount", script["unmount"])),
        killOutside=attempt(lambda: os.kill(int(outside), 15)),
        unrelayedPort=attempt(lambda: tcp(int(script["unrelayed_port"]))),
        readStoreAfterAll=attempt(lambda: Path(script["store"]).read_bytes()),
    )
    if "relayed_port" in script:  # a port the jail relays: its server's greeting
        try:
            with socket.create_connection(("127.0.0.1", int(script["relayed_port"])), 5) as s:
                probes["relayedPort"] = s.recv(64).decode()
        except OSError as exc:
            probes["relayedPort"] = f"refused: {type(exc).__name__}"
    return probes


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
    if sys.argv[1] == "--escape":  # the attempts alone, reported on stdout (tests/jail/)
        print(json.dumps(escape(json.loads(sys.argv[2]))))
        return 0
    prompt = sys.argv[1]
    state = Path(git("rev-parse", "--git-dir").strip()) / SCRIPT_FILE
    if prompt.startswith("{"):
        state.write_text(prompt)
        return implement(json.loads(prompt))
    return review(json.loads(state.read_text()), prompt)


if __name__ == "__main__":
    raise SystemExit(main())
