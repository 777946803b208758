"""Baseline endpoints for `tachograph bench`: the same body, validated only or inserted raw.

Served by uvicorn exactly like Tachograph, so the ratio isolates Tachograph's own work.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
from typing import Any

from fastapi import FastAPI

from api.framework import framework_options
from api.schemas import LifecycleEventBody


def bare_app() -> FastAPI:
    """Validates the lifecycle body and answers a pass."""
    app = FastAPI(**framework_options())  # the framework configured as Tachograph's

    @app.post("/api/sessions/{session_id}/events")
    async def ingest(session_id: str, body: LifecycleEventBody) -> dict[str, Any]:
        return {"outcome": "pass"}

    return app


def raw_insert_app() -> FastAPI:
    """Validates, then one raw INSERT + COMMIT per request (sqlite3 or psycopg)."""
    app = FastAPI(**framework_options())
    url = os.environ.get("BENCH_DATABASE_URL")
    local = threading.local()

    def connection() -> Any:
        conn = getattr(local, "conn", None)
        if conn is None:
            if url:
                import psycopg

                conn = psycopg.connect(url)
                conn.execute(
                    "CREATE TABLE IF NOT EXISTS bench_raw (id BIGSERIAL PRIMARY KEY, body TEXT)"
                )
            else:
                conn = sqlite3.connect(os.environ["BENCH_SQLITE_PATH"], timeout=30)
                conn.execute("PRAGMA journal_mode=WAL")
                conn.execute("PRAGMA synchronous=FULL")
                conn.execute(
                    "CREATE TABLE IF NOT EXISTS bench_raw (id INTEGER PRIMARY KEY, body TEXT)"
                )
            conn.commit()
            local.conn = conn
        return conn

    @app.post("/api/sessions/{session_id}/events")
    def ingest(session_id: str, body: LifecycleEventBody) -> dict[str, Any]:
        conn = connection()
        placeholder = "%s" if url else "?"
        conn.execute(
            f"INSERT INTO bench_raw (body) VALUES ({placeholder})",
            (json.dumps(body.model_dump()),),
        )
        conn.commit()
        return {"outcome": "pass"}

    return app
