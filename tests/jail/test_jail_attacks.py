"""The jail holds as root and as an unprivileged user (infra/jail.py, real bubblewrap).

Each case runs the stand-in agent's escape attempts inside a jail made by
`tests/jail/jail_driver.py`, started as that user, next to a bystander process of the
same user that holds a secret in its environment: its environment, the hidden directory
through its `/proc/<pid>/root`, its network namespace, a signal to it, the tmpfs over the
hidden directory, a loopback port that is not relayed, PostgreSQL by TCP and by its
socket: all refused; the relayed port answers.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from infra.jail import ITEMS, Jail, bwrap, installation
from tests.jail import outside

ROOT = Path(__file__).resolve().parents[2]
NOBODY = 65534
GREETING = "hello from outside"
AS_NOBODY = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]


def as_user(user: str) -> list[str]:
    return [] if user == "root" else AS_NOBODY


def interpreter(user: str) -> str:
    """A Python this user may run in a user namespace: the jail runs its init and the
    stand-in with it (one under /root, as pyenv installs it, is root's alone there)."""
    for python in (sys.executable, "/usr/bin/python3"):
        userns = ["bwrap", "--unshare-user", "--ro-bind", "/", "/", python, "-c", "pass"]
        done = subprocess.run([*as_user(user), *userns], capture_output=True)
        if done.returncode == 0:
            return python
    pytest.fail(f"no Python that {user} may run")


@pytest.fixture(params=["root", "unprivileged"])
def user(request: pytest.FixtureRequest) -> str:
    """Who runs the jail: root (as CI does), or `nobody` where the kernel allows it."""
    if os.geteuid() != 0:
        pytest.fail("these tests start the jail as root and as nobody, so they run as root")
    if request.param == "unprivileged":
        probe = [*AS_NOBODY, "bwrap", "--unshare-user", "--ro-bind", "/", "/", "true"]
        done = subprocess.run(probe, capture_output=True, text=True, timeout=30)
        if done.returncode != 0:
            pytest.skip(f"the kernel refuses an unprivileged user namespace: {done.stderr}")
    return str(request.param)


@pytest.fixture
def place(user: str) -> Iterator[Path]:
    """A directory outside /tmp and /var/tmp (hidden whole: the hidden one here must get a
    tmpfs of its own) that the user owns."""
    base = "/var/lib" if os.access("/var/lib", os.W_OK) else str(Path.home())
    path = Path(tempfile.mkdtemp(prefix="tg-jail-test-", dir=base))
    hidden = path / "hidden"
    (hidden / "checkout").mkdir(parents=True)
    (hidden / "store.sqlite").write_text("the store")
    (hidden / "keep").mkdir()
    if user != "root":
        for p in (path, hidden, hidden / "checkout", hidden / "store.sqlite", hidden / "keep"):
            os.chown(p, NOBODY, NOBODY)
    yield hidden
    shutil.rmtree(path)


@pytest.fixture
def bystander(user: str) -> Iterator[subprocess.Popen[bytes]]:
    with outside.bystander(as_user(user)) as proc:
        yield proc


@pytest.fixture
def greeter() -> Iterator[int]:
    """A loopback server outside that greets whoever connects: the relayed port."""
    listener = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            with client:
                client.sendall(GREETING.encode())

    threading.Thread(target=serve, daemon=True).start()
    yield int(listener.getsockname()[1])
    listener.close()


@pytest.fixture
def unrelayed_port() -> Iterator[int]:
    with outside.unrelayed_port() as port:
        yield port


def test_every_escape_is_refused_and_the_relayed_port_answers(
    user: str,
    place: Path,
    bystander: subprocess.Popen[bytes],
    greeter: int,
    unrelayed_port: int,
) -> None:
    for tool in ("nsenter", "umount"):
        assert shutil.which(tool), f"{tool} is needed to try the attack"
    # What the bystander exposes to a process that can see it: the attacks are real.
    assert outside.SECRET.encode() in Path(f"/proc/{bystander.pid}/environ").read_bytes()
    script = {
        "checkout": str(place / "checkout"),
        "store": str(place / "store.sqlite"),
        "outside_pid": str(bystander.pid),
        "server_pid": str(bystander.pid),
        "unmount": str(place),
        "unrelayed_port": str(unrelayed_port),
        "relayed_port": str(greeter),
    }
    config = {
        "relayedPort": greeter,
        "hidden": str(place),
        "keep": str(place / "keep"),
        "script": script,
    }
    done = subprocess.run(
        [*as_user(user), interpreter(user), "-m", "tests.jail.jail_driver", json.dumps(config)],
        cwd=ROOT,
        env={"PATH": os.environ["PATH"]},
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["isolation"] == {item: True for item in ITEMS}, report["missing"]
    assert str(place) in report["hidden"] and "/run" in report["hidden"]
    probes = report["probes"]
    assert probes.pop("relayedPort") == GREETING
    assert probes.pop("interfaces") == "lo"
    assert probes.pop("writeNextToClone") == "reached"  # `keep` is the agent's own
    refused = {k: v for k, v in probes.items() if v.startswith("refused")}
    assert refused == probes, probes
    assert len(probes) == 14
    assert bystander.poll() is None  # the signal never reached it
    assert not (place / "checkout" / "ESCAPED.md").exists()
    assert (place / "store.sqlite").read_text() == "the store"


def test_the_installation_inside_a_hidden_directory_stays_visible_and_read_only(
    tmp_path: Path,
) -> None:
    """Tachograph's own files (the hooks run them) are bound back read-only where a hidden
    directory covers them; nothing else of that directory is."""
    binary = bwrap()
    assert binary is not None
    keep = tmp_path / "attempt"
    keep.mkdir()
    jail = Jail(binary, [], [ROOT.parent], [keep], show=installation())
    # Paths bound back into the hidden directory (the attempt's, the jail's sockets) show
    # their first component there too when it holds them, as where the clone is in /tmp.
    bound = [Path(p) for p in (keep, jail.dir) if Path(p).is_relative_to(ROOT.parent)]
    mount_points = {p.relative_to(ROOT.parent).parts[0] for p in bound}
    look = (
        "import json, os, sys\n"
        "try:\n"
        f"    open({str(ROOT / 'jail-wrote-here')!r}, 'w')\n"
        "    wrote = 'reached'\n"
        "except OSError as exc:\n"
        "    wrote = type(exc).__name__\n"
        f"print(json.dumps([os.listdir({str(ROOT.parent)!r}), wrote]))\n"
    )
    try:
        done = subprocess.run(
            jail.wrap([sys.executable, "-I", "-c", look]),
            cwd=keep,
            capture_output=True,
            text=True,
            timeout=60,
        )
    finally:
        jail.close()
    assert done.returncode == 0, done.stderr
    listed, wrote = json.loads(done.stdout)
    assert sorted(listed) == sorted({ROOT.name} | mount_points) and wrote == "OSError"
    assert str(ROOT) in jail.show
    assert not (ROOT / "jail-wrote-here").exists()
