"""What runs first inside the agent's jail (infra/jail.py): loopback relays, then the agent.

bubblewrap makes the jail; its network namespace has a loopback interface and nothing
else. This program, the command bubblewrap starts, listens on 127.0.0.1 at each port it
was given and relays every connection through a Unix socket bound into the jail to a
relay outside (`infra.jail.UnixRelay`): Tachograph for the agent's hooks, and whatever
loopback endpoint the operator allows (a model proxy, say). Then it runs the command
and passes its exit status on.

With `--probe` it runs no command: it reports, as one JSON object on stdout, what the
jail looks like from where the agent would stand (namespaces, capabilities, session,
parent-death signal, interfaces, the hidden paths), for the prepare phase to judge.

    python -I infra/jail_init.py --forward PORT=SOCKET ... -- ARGV...
    python -I infra/jail_init.py --forward PORT=SOCKET ... --probe --hidden DIR ...

Standard library only: it starts before anything of the agent's, and must not import
code from the working directory (hence `-I`, and run by path rather than as a module).
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import functools
import json
import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Sequence

CONNECT_TIMEOUT_S = 30.0
PR_SET_PDEATHSIG = 1
PR_GET_PDEATHSIG = 2
CLONE_NEWUSER = 0x10000000
NAMESPACES = ("user", "pid", "mnt", "net")


def splice(a: socket.socket, b: socket.socket) -> None:
    def one_way(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError):
                dst.shutdown(socket.SHUT_WR)

    other = threading.Thread(target=one_way, args=(b, a), daemon=True)
    other.start()
    one_way(a, b)
    other.join()
    a.close()
    b.close()


def serve(listener: socket.socket, connect: Callable[[], socket.socket]) -> None:
    """Accept on `listener` until it is closed, relaying each connection to `connect()`."""
    while True:
        try:
            client, _ = listener.accept()
        except OSError:
            return  # closed

        def relay(client: socket.socket = client) -> None:
            try:
                upstream = connect()
            except OSError:
                client.close()
                return
            splice(client, upstream)

        threading.Thread(target=relay, daemon=True).start()


def _unix(path: str) -> socket.socket:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(CONNECT_TIMEOUT_S)
    s.connect(path)
    s.settimeout(None)
    return s


def _die_with_parent() -> None:
    # The relays serve the agent: if this process dies, the agent must not outlive it.
    ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def probe(hidden: Sequence[str]) -> dict[str, object]:
    """What the jail looks like from here; judged outside (infra.jail.judge)."""
    status = {}
    with open("/proc/self/status") as lines:
        for line in lines:
            key, _, value = line.partition(":")
            status[key] = value.strip()
    libc = ctypes.CDLL(None, use_errno=True)
    death = ctypes.c_int(0)
    libc.prctl(PR_GET_PDEATHSIG, ctypes.byref(death))
    mounts = _mount_types()
    return {
        "namespaces": {ns: os.readlink(f"/proc/self/ns/{ns}") for ns in NAMESPACES},
        # /proc mounted for this PID namespace names this process as it knows itself.
        "pid": os.getpid(),
        "procSelf": os.readlink("/proc/self"),
        "caps": {k: status.get(k) for k in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb")},
        "noNewPrivs": status.get("NoNewPrivs"),
        # 0 when the session's leader is outside this PID namespace (the caller's session).
        "sid": os.getsid(0),
        "parentDeathSignal": death.value,
        "interfaces": sorted(name for _, name in socket.if_nameindex()),
        "readOnlyRoot": bool(os.statvfs("/").f_flag & os.ST_RDONLY),
        "nestedUserns": _nested_userns(),
        "hidden": {p: {"type": mounts.get(p), "entries": _entries(p)} for p in hidden},
    }


def _mount_types() -> dict[str, str]:
    """Mount point → file system type of the mount on top."""
    types = {}
    with open("/proc/self/mountinfo") as lines:
        for line in lines:
            fields = line.split()
            after = fields.index("-")
            types[fields[4].replace("\\040", " ")] = fields[after + 1]
    return types


def _entries(path: str) -> list[str] | str:
    try:
        return sorted(os.listdir(path))
    except OSError as exc:
        return type(exc).__name__


def _nested_userns() -> str:
    """Whether a process here can make a user namespace of its own (tried in a child)."""
    pid = os.fork()
    if pid == 0:
        made = ctypes.CDLL(None, use_errno=True).unshare(CLONE_NEWUSER) == 0
        os._exit(0 if made else 1)
    _, status = os.waitpid(pid, 0)
    return "made" if os.waitstatus_to_exitcode(status) == 0 else "refused"


def run(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(prog="jail_init.py")
    parser.add_argument("--forward", action="append", default=[], metavar="PORT=SOCKET")
    parser.add_argument("--probe", action="store_true")
    parser.add_argument("--hidden", action="append", default=[], metavar="DIR")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if args.probe:
        print(json.dumps(probe(args.hidden)), flush=True)  # before any thread starts
    elif not command:
        parser.error("no command")
    for forward in args.forward:
        port, path = forward.split("=", 1)
        listener = socket.create_server(("127.0.0.1", int(port)), backlog=64)
        connect = functools.partial(_unix, path)
        threading.Thread(target=serve, args=(listener, connect), daemon=True).start()
    if args.probe:
        return 0
    child = subprocess.Popen(command, preexec_fn=_die_with_parent)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda signum, _frame: child.send_signal(signum))
    code = child.wait()
    if code < 0:  # killed by a signal: die of the same one, so the executor sees it
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    return code


if __name__ == "__main__":
    sys.exit(run(sys.argv[1:]))
