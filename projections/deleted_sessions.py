"""Sessions deleted so far, as a projection that shows per-session rows remembers them:
dispatches that arrive for a session after its deletion (real clients send stragglers)
are not shown. One table per projection, so each rebuilds on its own."""

from __future__ import annotations

from projections.store import Cursor

DDL = "CREATE TABLE IF NOT EXISTS {t} (session_id TEXT PRIMARY KEY)"


class DeletedSessions:
    """Asks its table once per session per batch, not once per event."""

    def __init__(self) -> None:
        self._known: dict[str, bool] = {}
        self.table = ""

    def forget(self) -> None:
        self._known.clear()

    def is_gone(self, cur: Cursor, session_id: str) -> bool:
        gone = self._known.get(session_id)
        if gone is None:
            cur.execute(f"SELECT 1 AS gone FROM {self.table} WHERE session_id = ?", (session_id,))
            gone = self._known[session_id] = cur.fetchone() is not None
        return gone

    def mark(self, cur: Cursor, session_id: str) -> None:
        self._known[session_id] = True
        cur.execute(
            f"INSERT INTO {self.table} (session_id) VALUES (?) ON CONFLICT (session_id) DO NOTHING",
            (session_id,),
        )
