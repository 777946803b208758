"""A long-lived process's secrets leave its environment once the settings hold them.

`serve` and `worker` read their secrets (the admin key, the log signing key, the
database URL and PGPASSWORD, the Coder hook secret, and every variable a hook, the
reflector or the approval notifier names as its secret) into `Settings` at start-up,
then call `scrub`: the variables leave `os.environ`, so no child process inherits them
(one that needs a value is given it explicitly), and their bytes are zeroed in the
environment block the process started with, which is what the kernel shows as
`/proc/<pid>/environ` and which removing a variable does not touch. Whoever can read
that file (a process of the same user where `/proc` is visible) finds no secret in it.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Iterable

from infra.executor import SERVER_SECRETS
from infra.settings import Settings


def secret_names(settings: Settings) -> frozenset[str]:
    """The variables that hold a secret this process has read into `settings`."""
    return SERVER_SECRETS | frozenset(settings.secrets)


def scrub(names: Iterable[str]) -> list[str]:
    """Remove the variables and zero them in the initial environment; which were there."""
    wanted = set(names)
    present = sorted(n for n in wanted if n in os.environ)
    for name in present:
        del os.environ[name]  # unsetenv: the C environment no longer points at it
    start, end = _environment_block()
    if start and end > start:
        block = ctypes.string_at(start, end - start)
        offset = 0
        for entry in block.split(b"\0"):
            name = entry.partition(b"=")[0].decode(errors="replace")
            if entry and name in wanted:
                ctypes.memset(start + offset, 0, len(entry))
            offset += len(entry) + 1
    return present


def _environment_block() -> tuple[int, int]:
    """Where the environment the process was started with lies (proc(5): stat fields
    50 and 51, env_start and env_end)."""
    try:
        with open("/proc/self/stat") as stat:
            fields = stat.read().rpartition(")")[2].split()
    except OSError:
        return 0, 0
    return int(fields[47]), int(fields[48])  # fields[0] is field 3
