"""Session titles for rows that name a session by id (approvals, activity), read in one
query per list so a page shows "Fix the login form" instead of `c1e1dc62` without a
request per row."""

from __future__ import annotations

from typing import Any

from projections.store import ReadStore

# Bound parameters per query: well below SQLite's and PostgreSQL's limits.
_CHUNK = 500


def with_session_titles(store: ReadStore, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Set `sessionTitle` on each row from its `sessionId` (null when the session has no
    title yet, is deleted, or the row names none); returns the same rows."""
    ids = sorted({str(r["sessionId"]) for r in rows if r.get("sessionId")})
    titles: dict[str, str | None] = {}
    for start in range(0, len(ids), _CHUNK):
        chunk = ids[start : start + _CHUNK]
        marks = ",".join("?" * len(chunk))
        for found in store.query(
            f"SELECT id, title FROM rm_sessions WHERE id IN ({marks})", tuple(chunk)
        ):
            titles[str(found["id"])] = found["title"]
    for row in rows:
        session_id = row.get("sessionId")
        row["sessionTitle"] = titles.get(str(session_id)) if session_id else None
    return rows
