"""Helpers for audit-integrity tests: a quick bulk history and a key for signing checkpoints."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from api.bootstrap import Services, build_services, open_read_store
from domain.application import Tachograph
from domain.session import Session
from infra.settings import Settings
from projections.store import ReadStore

KEY = "audit-test-signing-key-0123456789abcdef"


def bulk_history(app: Tachograph, sessions: int, per_save: int = 250) -> int:
    """Two events per session (created, renamed), many aggregates per transaction; the head."""
    for start in range(0, sessions, per_save):
        batch = [
            Session(
                workspace="default", title=f"s{i}", agent=None, agent_session_id=None, actor="auditor"
            )
            for i in range(start, min(start + per_save, sessions))
        ]
        for session in batch:
            session.rename(f"renamed {session.title}", "auditor")
        app.record(*batch)
    return int(app.recorder.max_notification_id() or 0)


@contextmanager
def audited_services(settings: Settings, sessions: int = 1250) -> Iterator[Services]:
    """Services with a signing key, a bulk history, and the read models caught up."""
    services = build_services(settings.with_(log_signing_key=KEY))
    try:
        bulk_history(services.app, sessions)
        services.runner.catch_up()
        yield services
    finally:
        services.stop()


@contextmanager
def read_store(settings: Settings) -> Iterator[ReadStore]:
    """A separate read-store connection (for checks after a process stopped)."""
    store = open_read_store(settings)
    try:
        yield store
    finally:
        store.close()
