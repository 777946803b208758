"""A pool check that pings a connection only when it has not been pinged for a second.

Pinging on every checkout (psycopg_pool's `check_connection`) finds the connections a
database restart left dead before a request uses them, but costs a round trip per
transaction: on the ingest path, one more than the append itself. A restart takes
longer than a second, so a connection pinged within the last second is handed out as
is; the rare one that died in that window fails its first use, and the recorder's
single retry (infra/pg_recorder.py) takes another connection.
"""

from __future__ import annotations

import time
from typing import Any

from psycopg_pool import ConnectionPool

MAX_AGE_S = 1.0
_ATTRIBUTE = "_tachograph_pinged_at"


def ping_when_stale(conn: Any) -> None:
    """psycopg_pool `check`: ping unless this connection was pinged under MAX_AGE_S ago."""
    now = time.monotonic()
    if not conn.closed and now - getattr(conn, _ATTRIBUTE, -MAX_AGE_S) < MAX_AGE_S:
        return
    ConnectionPool.check_connection(conn)
    setattr(conn, _ATTRIBUTE, now)
