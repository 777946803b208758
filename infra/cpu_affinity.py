"""Keep one process's Python threads on one CPU.

`serve` runs HTTP, the group commit and the projection runner as threads of one
interpreter, and they take turns holding its lock many times per request. When the
turn passes to a thread parked on the other core, that core has to be woken and the
thread resumes with a cold cache; on one core the hand-over is a plain context
switch. Measured under the ingest benchmark (16 connections, 2 cores): +15-25%
requests/s on SQLite and PostgreSQL, while the bare single-threaded endpoint gained
nothing from the same pinning. The process only ever runs Python on one core at a
time anyway; what it gives up is overlapping the database driver's own C work.

The projection runner is the exception: it takes the lock for long stretches (a
batch of events at a time), so it gains little from sharing the core, and left
free its database work overlaps the requests. Pinned with the rest, sequential
hook-gateway dispatches were slower (p99 overhead 3.5-5.4 ms against 2.9-3.6 ms
free, same ingest rate either way).
"""

from __future__ import annotations

import os

AUTO = "auto"
ALL = "all"


def allowed_cpus() -> set[int] | None:
    """The CPUs this process may run on; None where the OS cannot say (not Linux)."""
    getter = getattr(os, "sched_getaffinity", None)
    return set(getter(0)) if getter is not None else None


def choose_cpu(setting: str, allowed: set[int], pid: int) -> int | None:
    """The CPU to pin to, or None to leave the process where the OS puts it.

    `setting` is validated by Settings: `auto`, `all` or an allowed CPU's number.
    `auto` spreads replicas started on one host by process id; a process allowed
    one CPU only (a container limited to it) needs no pinning.
    """
    if setting == ALL or len(allowed) < 2:
        return None
    if setting == AUTO:
        return sorted(allowed)[pid % len(allowed)]
    return int(setting)


def pin_to(cpu: int) -> None:
    """Move every thread of this process to `cpu`; threads started later inherit it."""
    for task in os.listdir("/proc/self/task"):
        os.sched_setaffinity(int(task), {cpu})


def free_thread(native_id: int, cpus: set[int]) -> None:
    """Let one thread run on `cpus` again."""
    os.sched_setaffinity(native_id, cpus)
