"""Worker liveness: heartbeats that tell restart recovery whose running work is orphaned.

Recovery must never requeue an attempt another live process is running, so every
claim names its worker and workers heartbeat into a small table beside the read
models. A worker is gone when its row is missing or stale, or (same host) when its
process no longer exists, which lets a restarted worker recover at once.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from uuid import uuid4

from projections.base import iso
from projections.store import ReadStore

DDL = (
    "CREATE TABLE IF NOT EXISTS task_workers (id TEXT PRIMARY KEY, host TEXT NOT NULL, "
    "pid INTEGER NOT NULL, seen_at TEXT NOT NULL)"
)
# Workers that run tasks (an executor is configured): API replicas without one answer
# health with what the whole deployment can run, not only what they run themselves.
EXECUTORS_DDL = (
    "CREATE TABLE IF NOT EXISTS task_executors (worker_id TEXT PRIMARY KEY, "
    "slots INTEGER NOT NULL, seen_at TEXT NOT NULL)"
)


def pid_alive(pid: int) -> bool:
    """Whether a process with this id exists on this host."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # exists, owned by someone else
    return True


class WorkerRegistry:
    """This process's worker identity and what it knows of the others."""

    def __init__(
        self,
        store: ReadStore,
        *,
        stale_after: timedelta = timedelta(seconds=30),
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        executor_slots: int = 0,
    ) -> None:
        self.store = store
        self.executor_slots = executor_slots
        self.host = socket.gethostname()
        self.pid = os.getpid()
        self.worker_id = f"{self.host}:{self.pid}:{uuid4().hex[:12]}"
        self.stale_after = stale_after
        self.clock = clock

    def ensure_schema(self) -> None:
        with self.store.transaction() as cur:
            cur.execute(DDL)
            cur.execute(EXECUTORS_DDL)

    def beat(self) -> None:
        """Record that this worker is alive."""
        with self.store.transaction() as cur:
            cur.execute(
                "INSERT INTO task_workers (id, host, pid, seen_at) VALUES (?,?,?,?) "
                "ON CONFLICT (id) DO UPDATE SET seen_at = excluded.seen_at",
                (self.worker_id, self.host, self.pid, iso(self.clock())),
            )
            if self.executor_slots:
                cur.execute(
                    "INSERT INTO task_executors (worker_id, slots, seen_at) VALUES (?,?,?) "
                    "ON CONFLICT (worker_id) DO UPDATE SET seen_at = excluded.seen_at",
                    (self.worker_id, self.executor_slots, iso(self.clock())),
                )

    def forget(self) -> None:
        """Remove this worker's row (clean shutdown)."""
        with self.store.transaction() as cur:
            cur.execute("DELETE FROM task_workers WHERE id = ?", (self.worker_id,))
            cur.execute("DELETE FROM task_executors WHERE worker_id = ?", (self.worker_id,))

    def prune(self, older_than: timedelta = timedelta(days=1)) -> None:
        """Drop rows of workers long gone (daily maintenance)."""
        with self.store.transaction() as cur:
            cutoff = iso(self.clock() - older_than)
            cur.execute("DELETE FROM task_workers WHERE seen_at < ?", (cutoff,))
            cur.execute("DELETE FROM task_executors WHERE seen_at < ?", (cutoff,))

    def live_executors(self) -> dict[str, int]:
        """Processes with an executor whose heartbeat is fresh, and their task slots."""
        row = self.store.query_one(
            "SELECT COUNT(*) AS processes, COALESCE(SUM(slots), 0) AS slots "
            "FROM task_executors WHERE seen_at >= ?",
            (iso(self.clock() - self.stale_after),),
        )
        assert row is not None  # an aggregate always answers one row
        return {"live": int(row["processes"]), "slots": int(row["slots"])}

    def is_gone(self, worker_id: str | None) -> bool:
        """Whether the named worker can no longer be running anything."""
        if worker_id == self.worker_id:
            return False
        if worker_id is None:
            return True
        row = self.store.query_one(
            "SELECT host, pid, seen_at FROM task_workers WHERE id = ?", (worker_id,)
        )
        if row is None:
            return True
        if row["host"] == self.host and (
            int(row["pid"]) == self.pid or not pid_alive(int(row["pid"]))
        ):
            return True  # same host: that process is gone (or its pid is now ours)
        return str(row["seen_at"]) < str(iso(self.clock() - self.stale_after))
