"""Fixtures for task tests: a fake agent executable, a settable clock, settled reads."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from bootstrap import Services, build_services
from infra.settings import Settings

FAKE_AGENT = str(Path(__file__).with_name("fake_agent.py"))


@dataclass
class Clock:
    """A clock tests move by hand."""

    now: datetime = field(default_factory=lambda: datetime(2026, 3, 1, 12, 0, tzinfo=UTC))

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def task_settings(settings: Settings) -> Settings:
    """Settings with the fake agent as TACHOGRAPH_TASK_COMMAND and short timings."""
    return settings.with_(
        task_command=(sys.executable, FAKE_AGENT, "{prompt}"),
        task_poll_interval_s=0.05,
        task_kill_grace_s=0.3,
        task_timeout_s=30.0,
        task_concurrency=2,
    )


@pytest.fixture
def executing(task_settings: Settings) -> Iterator[Services]:
    """Started services whose scheduler runs the fake agent."""
    built = build_services(task_settings)
    built.start()
    try:
        yield built
    finally:
        built.stop()


def settled(services: Services) -> None:
    """Wait until the read models hold everything in the log so far."""
    head = services.app.recorder.max_notification_id() or 0
    if services.started:
        assert services.runner.wait_for(head, 10)
    else:
        services.runner.catch_up()


def wait_until(check: Callable[[], Any], timeout: float = 15.0, every: float = 0.02) -> Any:
    """Poll `check` until it returns something truthy (raise with the last value if never)."""
    deadline = time.monotonic() + timeout
    value = check()
    while not value:
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout} s (last: {value!r})")
        time.sleep(every)
        value = check()
    return value
