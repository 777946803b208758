"""Five-field cron in the server timezone, evaluated with APScheduler's CronTrigger."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from apscheduler.triggers.cron import CronTrigger

from domain.errors import RuleViolation

_AFTER = timedelta(microseconds=1)


class InvalidCron(RuleViolation):
    """Not a five-field cron expression, or one that never fires."""

    code = "invalid_cron"


def cron_fire_times(timezone: str) -> Callable[[str], Callable[[datetime], datetime | None]]:
    """Validator-and-evaluator factory for schedules in `timezone` (TACHOGRAPH_TIMEZONE)."""

    def fire_times(expression: str) -> Callable[[datetime], datetime | None]:
        try:
            trigger = CronTrigger.from_crontab(expression, timezone=timezone)
        except ValueError as exc:
            raise InvalidCron(
                f"cron {expression!r} is not a valid five-field cron: {exc}."
            ) from None
        if trigger.get_next_fire_time(None, datetime.now(UTC)) is None:
            raise InvalidCron(f"cron {expression!r} never fires.")

        def next_after(instant: datetime) -> datetime | None:
            fire = trigger.get_next_fire_time(None, instant + _AFTER)
            return fire.astimezone(UTC) if fire is not None else None

        return next_after

    return fire_times
