"""The jail of a self-update agent: bubblewrap namespaces, hidden paths, relayed ports.

Each agent run of a cycle starts under `bwrap` (bubblewrap, the Debian package) with:
- its own **user namespace**, whoever runs Tachograph (as root too): the agent never
  holds a capability over anything of the host's;
- its own **PID namespace** with its own `/proc`: no process outside is visible, so
  none can be signalled, traced, or read through `/proc/<pid>/environ` or `root`;
- its own **mount namespace**: `/` read-only; `/run` and `/var/run` (local servers' Unix
  sockets), `/tmp`, `/var/tmp` and every hidden path covered by an empty tmpfs; what the agent must
  run (Tachograph's installation, for its hooks) bound back read-only, the kept paths
  (the attempt's clone, `HOME`, `TMPDIR`) writable;
- a **network namespace with loopback only**, where `infra/jail_init.py` listens on
  each relayed port and forwards it over a Unix socket to a `UnixRelay` outside;
- **no_new_privs**, **every capability dropped** (bounding set included), a **new
  session** (no terminal to inject into), **die with its parent**, and no further user
  namespaces (so no nested namespace in which the mounts could be rearranged).

`Jail.probe` runs `jail_init --probe` exactly where the agent would run and `judge`
compares what it saw with the host's view: the evidence is observed, not assumed.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from infra import jail_init
from infra.jail_init import CONNECT_TIMEOUT_S, NAMESPACES, serve

# Where local servers keep their Unix sockets (PostgreSQL, MySQL, D-Bus, Docker), and
# the machine's shared temporary directories: never the agent's to see.
ALWAYS_HIDDEN = ("/run", "/var/run", "/tmp", "/var/tmp")
ITEMS = (
    "userNamespace",
    "pidNamespace",
    "mountNamespace",
    "loopbackOnlyNetwork",
    "noNewPrivs",
    "capabilitiesDropped",
    "newSession",
    "dieWithParent",
    "readOnlyRoot",
    "nestedUserNamespacesRefused",
    "hiddenPaths",
)
PROBE_TIMEOUT_S = 30.0


def bwrap() -> str | None:
    """The bubblewrap binary on PATH, if any."""
    return shutil.which("bwrap")


def installation() -> list[Path]:
    """Where this Python and Tachograph's packages are: what a hook in the jail runs."""
    return [Path(sys.prefix), Path(sys.base_prefix), Path(jail_init.__file__).parents[1]]


@functools.cache
def _supports(binary: str, option: str) -> bool:
    done = subprocess.run([binary, "--help"], capture_output=True, text=True, timeout=30)
    return option in done.stdout


@dataclass(frozen=True)
class Isolation:
    """What a probe found: each item held or not, and what was seen where not."""

    held: dict[str, bool]
    missing: dict[str, str] = field(default_factory=dict)

    @classmethod
    def none(cls, why: str) -> Isolation:
        return cls({item: False for item in ITEMS}, {item: why for item in ITEMS})

    @property
    def complete(self) -> bool:
        return all(self.held.values())


class UnixRelay:
    """Outside the jail: a Unix socket at `path` relayed to 127.0.0.1:`port`."""

    def __init__(self, path: str, port: int) -> None:
        self.path = path
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener.bind(path)
        self._listener.listen(64)
        address = ("127.0.0.1", port)
        connect = functools.partial(socket.create_connection, address, CONNECT_TIMEOUT_S)
        threading.Thread(target=serve, args=(self._listener, connect), daemon=True).start()

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)  # wakes the accepting thread
        self._listener.close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)


class Jail:
    """The jail of one attempt: its relays outside, and how to run a command inside."""

    def __init__(
        self,
        binary: str,
        ports: Sequence[int],
        hidden: Sequence[Path],
        keep: Sequence[Path],
        show: Sequence[Path] = (),
    ) -> None:
        """`hidden` paths covered, `keep` ones bound back writable, `show` ones read-only
        (where they lie inside a hidden one: elsewhere all of / is read-only anyway)."""
        self.binary = binary
        # Unix socket paths are limited to 108 bytes: a short directory of its own.
        self.dir = Path(tempfile.mkdtemp(prefix="tg-jail-"))
        self.forwards = {p: str(self.dir / f"{p}.sock") for p in sorted(set(ports))}
        self.relays = [UnixRelay(path, p) for p, path in self.forwards.items()]
        found = [os.path.realpath(p) for p in (*ALWAYS_HIDDEN, *map(str, hidden))]
        dirs = sorted({p for p in found if os.path.isdir(p)}, key=len)
        # A path inside another hidden one is covered already.
        self.hidden = [p for p in dirs if not any(p != q and _inside(p, q) for q in dirs)]
        self.keep = [os.path.realpath(p) for p in keep]
        shown = {os.path.realpath(p) for p in show}
        self.show = sorted(p for p in shown if any(_inside(p, h) for h in self.hidden))

    def bwrap_argv(self) -> list[str]:
        argv = [self.binary, "--unshare-all", "--unshare-user"]
        if _supports(self.binary, "--disable-userns"):
            argv.append("--disable-userns")
        argv += ["--die-with-parent", "--new-session", "--cap-drop", "ALL"]
        argv += ["--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev"]
        for path in self.hidden:
            argv += ["--tmpfs", path]
        for path in self.show:
            argv += ["--ro-bind", path, path]
        for path in self.keep:
            argv += ["--bind", path, path]
        return [*argv, "--ro-bind", str(self.dir), str(self.dir)]

    def _init(self, *extra: str) -> list[str]:
        # By path, isolated: it imports nothing but the standard library, so any Python
        # the jail can see runs it, and nothing from the working directory is imported.
        init = [sys.executable, "-I", jail_init.__file__]
        for port, path in self.forwards.items():
            init += ["--forward", f"{port}={path}"]
        return [*self.bwrap_argv(), "--", *init, *extra]

    def wrap(self, argv: Sequence[str]) -> tuple[str, ...]:
        """The command line that runs `argv` in the jail."""
        return tuple(self._init("--", *argv))

    def probe(self) -> Isolation:
        """Run the probe where the agent would run, and judge what it saw."""
        hidden = [a for p in self.hidden for a in ("--hidden", p)]
        try:
            done = subprocess.run(
                self._init("--probe", *hidden),
                capture_output=True,
                text=True,
                timeout=PROBE_TIMEOUT_S,
                start_new_session=True,
                cwd=self.keep[0] if self.keep else None,
                env={"PATH": os.environ.get("PATH", os.defpath)},
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            return Isolation.none(f"bwrap could not run: {exc}")
        if done.returncode != 0:
            said = done.stderr.strip().splitlines()[-1:] or [f"exit {done.returncode}"]
            return Isolation.none(f"bwrap failed: {said[0]}")
        bound = [*self.keep, *self.show, str(self.dir)]
        return judge(json.loads(done.stdout), self.hidden, bound)

    def close(self) -> None:
        for relay in self.relays:
            relay.close()
        shutil.rmtree(self.dir, ignore_errors=True)


def judge(seen: dict[str, Any], hidden: Sequence[str], kept: Sequence[str]) -> Isolation:
    """Each item of the isolation, from the probe's view compared with this process's."""
    host = {ns: os.readlink(f"/proc/self/ns/{ns}") for ns in NAMESPACES}
    inner = seen["namespaces"]
    caps = {k: v for k, v in seen["caps"].items() if v is None or int(v, 16) != 0}
    covered = {p: _covered(p, seen["hidden"].get(p), kept) for p in hidden}
    checks: dict[str, tuple[bool, str]] = {
        "userNamespace": (inner["user"] != host["user"], f"user namespace {inner['user']}"),
        "pidNamespace": (
            inner["pid"] != host["pid"] and seen["procSelf"] == str(seen["pid"]),
            f"{inner['pid']}, /proc/self is {seen['procSelf']} for pid {seen['pid']}",
        ),
        "mountNamespace": (inner["mnt"] != host["mnt"], f"mount namespace {inner['mnt']}"),
        "loopbackOnlyNetwork": (
            inner["net"] != host["net"] and seen["interfaces"] == ["lo"],
            f"{inner['net']} with interfaces {','.join(seen['interfaces'])}",
        ),
        "noNewPrivs": (seen["noNewPrivs"] == "1", f"NoNewPrivs {seen['noNewPrivs']}"),
        "capabilitiesDropped": (not caps, f"capabilities left: {caps}"),
        "newSession": (seen["sid"] != 0, "the session is the caller's"),
        "dieWithParent": (seen["parentDeathSignal"] == 9, "no parent-death signal"),
        "readOnlyRoot": (seen["readOnlyRoot"], "/ is writable"),
        "nestedUserNamespacesRefused": (
            seen["nestedUserns"] == "refused",
            "a process in the jail can make a user namespace",
        ),
        "hiddenPaths": (
            all(why is None for why in covered.values()),
            "; ".join(f"{p}: {why}" for p, why in covered.items() if why is not None),
        ),
    }
    held = {item: ok for item, (ok, _) in checks.items()}
    return Isolation(held, {item: why for item, (ok, why) in checks.items() if not ok})


def _covered(path: str, seen: dict[str, Any] | None, kept: Sequence[str]) -> str | None:
    """None when `path` is an empty tmpfs but for the way to the kept paths, else why not."""
    if seen is None or seen["type"] != "tmpfs":
        return f"not covered ({seen and seen['type']})"
    ways = {Path(k).relative_to(path).parts[0] for k in kept if _inside(k, path) and k != path}
    shown = seen["entries"]
    if not isinstance(shown, list):
        return f"unreadable ({shown})"
    extra = sorted(set(shown) - ways)
    return f"shows {extra}" if extra else None


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")
