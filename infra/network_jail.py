"""A network with loopback only, and hidden paths, for an agent whose work must stay put.

`run` (the module's entry point) moves itself into a fresh network namespace, which has
a loopback interface and nothing else: no route out, no DNS, no host ports. On that
loopback it listens on the ports it was given and relays each connection through a Unix
socket to a server outside (`UnixRelay`, run by the parent): Tachograph for the agent's
hooks, and whatever loopback endpoint the operator allows (a model proxy, say). Then it
runs the command and passes its exit status on. A process the agent starts inherits the
namespace: there is no way back out of it without privileges the agent does not have.

It also gets a private mount namespace in which `/run` (where local servers keep their
Unix sockets: PostgreSQL, MySQL, D-Bus, Docker) and every `--hide` path are covered by an
empty tmpfs, except the `--keep` paths inside them, which are bound back in place. A
network namespace alone cuts TCP and UDP, not a Unix socket on the file system, and not
a database file the agent could open. Nothing outside the namespace changes.

Entering the namespaces takes CAP_SYS_ADMIN, or an unprivileged user namespace where the
kernel allows one (the current user mapped to itself, so files keep their owner).

    python -I -m infra.network_jail --forward PORT=SOCKET ... --hide DIR ... --keep DIR \
        -- ARGV...

Standard library only: the jail starts before anything of the agent's, and must not
import code from the working directory (hence `-I` in `jail_argv`).
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import fcntl
import functools
import os
import signal
import socket
import struct
import subprocess
import sys
import threading
from collections.abc import Callable, Sequence

CLONE_NEWNET = 0x40000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWNS = 0x00020000
MS_NOSUID = 2
MS_NODEV = 4
MS_BIND = 4096
MS_REC = 16384
MS_PRIVATE = 1 << 18
MNT_DETACH = 2
ALWAYS_HIDDEN = ("/run",)
SIOCGIFFLAGS = 0x8913
SIOCSIFFLAGS = 0x8914
IFF_UP = 0x1
PR_SET_PDEATHSIG = 1
CONNECT_TIMEOUT_S = 30.0


def jail_argv(
    forwards: dict[int, str],
    argv: Sequence[str],
    hide: Sequence[str] = (),
    keep: Sequence[str] = (),
) -> list[str]:
    """The command line that runs `argv` in the jail, loopback `port` relayed to `socket`."""
    jail = [sys.executable, "-I", "-m", "infra.network_jail"]
    for port, path in sorted(forwards.items()):
        jail += ["--forward", f"{port}={path}"]
    for path in hide:
        jail += ["--hide", path]
    for path in keep:
        jail += ["--keep", path]
    return [*jail, "--", *argv]


@functools.cache
def available() -> bool:
    """Whether this machine lets a process enter a loopback-only network namespace."""
    try:
        done = subprocess.run(jail_argv({}, ["true"]), capture_output=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


class UnixRelay:
    """Outside the jail: a Unix socket at `path` relayed to 127.0.0.1:`port`."""

    def __init__(self, path: str, port: int) -> None:
        self.path = path
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener.bind(path)
        self._listener.listen(64)
        address = ("127.0.0.1", port)
        connect = functools.partial(socket.create_connection, address, CONNECT_TIMEOUT_S)
        threading.Thread(target=_serve, args=(self._listener, connect), daemon=True).start()

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)  # wakes the accepting thread
        self._listener.close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)


def _enter_namespaces() -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(CLONE_NEWNET | CLONE_NEWNS) != 0:
        # Not privileged: an unprivileged user namespace owns the new namespaces.
        uid, gid = os.getuid(), os.getgid()
        if libc.unshare(CLONE_NEWUSER | CLONE_NEWNET | CLONE_NEWNS) != 0:
            raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWNET | CLONE_NEWNS) failed")
        with open("/proc/self/setgroups", "w") as out:
            out.write("deny")
        with open("/proc/self/uid_map", "w") as out:
            out.write(f"{uid} {uid} 1")
        with open("/proc/self/gid_map", "w") as out:
            out.write(f"{gid} {gid} 1")
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        request = struct.pack("16sH22x", b"lo", 0)
        flags = struct.unpack("16sH", fcntl.ioctl(s, SIOCGIFFLAGS, request)[:18])[1]
        fcntl.ioctl(s, SIOCSIFFLAGS, struct.pack("16sH22x", b"lo", flags | IFF_UP))


def _mount(source: str, target: str, fstype: str | None, flags: int, data: str = "") -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    done = libc.mount(
        source.encode(), target.encode(), fstype.encode() if fstype else None, flags, data.encode()
    )
    if done != 0:
        raise OSError(ctypes.get_errno(), f"mount {source} on {target} failed")


def _hide(hidden: Sequence[str], kept: Sequence[str]) -> None:
    """Cover each hidden directory with an empty tmpfs, binding the kept ones back."""
    cwd = os.getcwd()
    # Private first: nothing mounted here propagates to the host's mount namespace.
    _mount("none", "/", None, MS_REC | MS_PRIVATE)
    hidden = [os.path.realpath(p) for p in (*ALWAYS_HIDDEN, *hidden) if os.path.isdir(p)]
    # A path inside another hidden one is covered already.
    tops = sorted({p for p in hidden if not any(p != q and _inside(p, q) for q in hidden)}, key=len)
    kept = [os.path.realpath(p) for p in kept if os.path.isdir(p)]
    stash = [k for k in kept if any(_inside(k, top) for top in tops)]
    held: list[tuple[str, int]] = []
    for path in stash:  # held open: a directory fd still reaches it once covered
        held.append((path, os.open(path, os.O_RDONLY | os.O_DIRECTORY)))
    for top in tops:
        _mount("tmpfs", top, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755")
    for path, fd in held:
        os.makedirs(path, exist_ok=True)
        _mount(f"/proc/self/fd/{fd}", path, None, MS_BIND | MS_REC)
        os.close(fd)
    os.chdir(cwd)  # the kept directory, not the one the tmpfs now covers


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def _splice(a: socket.socket, b: socket.socket) -> None:
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


def _serve(listener: socket.socket, connect: Callable[[], socket.socket]) -> None:
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
            _splice(client, upstream)

        threading.Thread(target=relay, daemon=True).start()


def _unix(path: str) -> socket.socket:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(CONNECT_TIMEOUT_S)
    s.connect(path)
    s.settimeout(None)
    return s


def _die_with_parent() -> None:
    # The jail relays for the agent: if the jail dies, the agent must not outlive it.
    ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def run(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m infra.network_jail")
    parser.add_argument("--forward", action="append", default=[], metavar="PORT=SOCKET")
    parser.add_argument("--hide", action="append", default=[], metavar="DIR")
    parser.add_argument("--keep", action="append", default=[], metavar="DIR")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command")
    try:
        _enter_namespaces()
        _hide(args.hide, args.keep)
    except OSError as exc:
        print(f"network_jail: no contained namespace: {exc}", file=sys.stderr)
        return 125
    for forward in args.forward:
        port, path = forward.split("=", 1)
        listener = socket.create_server(("127.0.0.1", int(port)), backlog=64)
        connect = functools.partial(_unix, path)
        threading.Thread(target=_serve, args=(listener, connect), daemon=True).start()
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
