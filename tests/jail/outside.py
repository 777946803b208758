"""What lies outside a jail in its tests: a bystander process holding a secret in its
environment, and a loopback port that nothing relays."""

from __future__ import annotations

import socket
import subprocess
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

SECRET = "bystander-secret-7e2a"


@contextmanager
def bystander(prefix: Sequence[str] = ()) -> Iterator[subprocess.Popen[bytes]]:
    """`sleep`, started through `prefix` (setpriv, to run as another user)."""
    proc = subprocess.Popen([*prefix, "sleep", "300"], env={"SENTINEL_SECRET": SECRET})
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait()


@contextmanager
def unrelayed_port() -> Iterator[int]:
    """A port listening on the host's loopback that no jail relays."""
    with socket.create_server(("127.0.0.1", 0)) as listener:
        yield int(listener.getsockname()[1])
