"""Model usage read model: one row per reported model request, summed when read.

Rows carry their session, workspace, agent, model and UTC day, so every grouping of
`GET /api/usage` is one GROUP BY, and a session's totals one more. A deleted session's
requests leave every read model with it (its events stay in the log), as its timeline
does; ones reported after the deletion are not shown either.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Final

from projections import deleted_sessions
from projections.base import Envelope, Projection, handles, iso
from projections.store import Cursor, ReadStore

GROUPINGS: Final = {
    "session": "session_id",
    "workspace": "workspace_id",
    "agent": "agent",
    "model": "model",
    "day": "day",
}
_COLUMNS: Final = (
    "id", "position", "session_id", "workspace_id", "agent", "agent_session_id", "model",
    "input_tokens", "output_tokens", "cache_read_tokens", "cache_creation_tokens",
    "cost_usd", "duration_ms", "prompt_id", "requested_at", "day",
)  # fmt: skip
_SUMS: Final = (
    "COUNT(*) AS requests, SUM(input_tokens) AS input_tokens, "
    "SUM(output_tokens) AS output_tokens, SUM(cache_read_tokens) AS cache_read_tokens, "
    "SUM(cache_creation_tokens) AS cache_creation_tokens, "
    # No reported cost sums to 0 (not NULL, which each store sorts differently).
    "COALESCE(SUM(cost_usd), 0) AS cost_usd"
)


class UsageProjection(Projection):
    """Every model request a runtime reported, by session."""

    name = "usage"
    tables = {
        "model_requests": [
            "CREATE TABLE IF NOT EXISTS {t} (id TEXT PRIMARY KEY, position BIGINT NOT NULL, "
            "session_id TEXT NOT NULL, workspace_id TEXT NOT NULL, agent TEXT NOT NULL, "
            "agent_session_id TEXT NOT NULL, model TEXT, input_tokens BIGINT NOT NULL, "
            "output_tokens BIGINT NOT NULL, cache_read_tokens BIGINT NOT NULL, "
            "cache_creation_tokens BIGINT NOT NULL, cost_usd DOUBLE PRECISION, "
            "duration_ms BIGINT, prompt_id TEXT, requested_at TEXT NOT NULL, day TEXT NOT NULL)",
            "CREATE INDEX IF NOT EXISTS {t}_session ON {t} (session_id, requested_at)",
        ],
        "usage_deleted": [deleted_sessions.DDL],
    }
    deferred_indexes = {
        "model_requests": [
            "CREATE INDEX IF NOT EXISTS {t}_day ON {t} (day)",
            "CREATE INDEX IF NOT EXISTS {t}_position ON {t} (position)",
        ]
    }

    def __init__(self, prefix: str = "rm_") -> None:
        super().__init__(prefix)
        self._gone = deleted_sessions.DeletedSessions()
        self._gone.table = self.t["usage_deleted"]
        self._rows: list[tuple[Any, ...]] = []

    def begin_batch(self, cur: Cursor) -> None:
        self._rows.clear()
        self._gone.forget()

    @handles("ModelRequest.Created")
    def request(self, cur: Cursor, e: Envelope) -> None:
        d = e.data
        session_id = str(d["session_id"])
        if self._gone.is_gone(cur, session_id):
            return
        at = iso(d["requested_at"])
        self._rows.append(
            (
                e.key,
                e.position,
                session_id,
                d["workspace"],
                d["agent"],
                d["agent_session_id"],
                d["model"],
                d["input_tokens"],
                d["output_tokens"],
                d["cache_read_tokens"],
                d["cache_creation_tokens"],
                d["cost_usd"],
                d["duration_ms"],
                d["prompt_id"],
                at,
                at[:10],
            )  # fmt: skip
        )

    @handles("Session.Deleted")
    def session_deleted(self, cur: Cursor, e: Envelope) -> None:
        self.end_batch(cur)
        cur.execute(f"DELETE FROM {self.t['model_requests']} WHERE session_id = ?", (e.key,))
        self._gone.mark(cur, e.key)

    def end_batch(self, cur: Cursor) -> None:
        if self._rows:
            placeholders = ",".join("?" * len(_COLUMNS))
            cur.executemany(
                f"INSERT INTO {self.t['model_requests']} ({', '.join(_COLUMNS)}) "
                f"VALUES ({placeholders})",
                self._rows,
            )
            self._rows.clear()


# Reading


def usage_item(row: dict[str, Any]) -> dict[str, Any]:
    """The wire shape of summed rows (no requests: all zero)."""
    return {
        "requests": int(row.get("requests") or 0),
        "inputTokens": int(row.get("input_tokens") or 0),
        "outputTokens": int(row.get("output_tokens") or 0),
        "cacheReadTokens": int(row.get("cache_read_tokens") or 0),
        "cacheCreationTokens": int(row.get("cache_creation_tokens") or 0),
        "costUsd": round(float(row.get("cost_usd") or 0.0), 9),
    }


NO_USAGE: Final = usage_item({})


def usage_by(
    store: ReadStore,
    group_by: str,
    *,
    since: str | None = None,
    until: str | None = None,
    workspace: str | None = None,
) -> list[dict[str, Any]]:
    """Usage summed per `group_by` (a key of GROUPINGS), for requests at or after
    `since` and before `until` (ISO-8601 UTC); largest cost first."""
    column = GROUPINGS[group_by]
    where, params = _window(since, until, workspace)
    rows = store.query(
        f"SELECT {column} AS key, {_SUMS} FROM rm_model_requests{where} "
        f"GROUP BY {column} ORDER BY cost_usd DESC, requests DESC, {column}",
        params,
    )
    return [{"key": r["key"], **usage_item(r)} for r in rows]


def _window(since: str | None, until: str | None, workspace: str | None) -> tuple[str, list[Any]]:
    clauses: list[str] = []
    params: list[Any] = []
    if since is not None:
        clauses.append("requested_at >= ?")
        params.append(since)
    if until is not None:
        clauses.append("requested_at < ?")
        params.append(until)
    if workspace is not None:
        clauses.append("workspace_id = ?")
        params.append(workspace)
    return (" WHERE " + " AND ".join(clauses) if clauses else ""), params


def sessions_usage(store: ReadStore, session_ids: Iterable[str]) -> dict[str, dict[str, Any]]:
    """Each session's usage (sessions without requests: zeros)."""
    ids = list(session_ids)
    found: dict[str, dict[str, Any]] = {sid: dict(NO_USAGE) for sid in ids}
    for start in range(0, len(ids), 500):
        chunk = ids[start : start + 500]
        marks = ",".join("?" * len(chunk))
        rows = store.query(
            f"SELECT session_id, {_SUMS} FROM rm_model_requests "
            f"WHERE session_id IN ({marks}) GROUP BY session_id",
            chunk,
        )
        for r in rows:
            found[r["session_id"]] = usage_item(r)
    return found


def session_requests(store: ReadStore, session_id: str) -> list[dict[str, Any]]:
    """A session's model requests, oldest first, as the timeline shows them."""
    rows = store.query(
        "SELECT * FROM rm_model_requests WHERE session_id = ? ORDER BY requested_at, position",
        (session_id,),
    )
    return [
        {
            "at": r["requested_at"],
            "model": r["model"],
            "promptId": r["prompt_id"],
            "durationMs": r["duration_ms"],
            **{k: v for k, v in usage_item({**r, "requests": 1}).items() if k != "requests"},
        }
        for r in rows
    ]


def cost_over_time(
    store: ReadStore, *, since: str | None = None, until: str | None = None
) -> list[dict[str, Any]]:
    """Cost and requests per workspace per day, oldest day first (the page's chart)."""
    where, params = _window(since, until, None)
    rows = store.query(
        f"SELECT workspace_id, day, {_SUMS} FROM rm_model_requests{where} "
        "GROUP BY workspace_id, day ORDER BY day, workspace_id",
        params,
    )
    return [{"workspace": r["workspace_id"], "day": r["day"], **usage_item(r)} for r in rows]
