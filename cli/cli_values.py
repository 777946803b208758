"""Values a person types on the command line: times and session ids.

Errors name the value as typed and say what would have been accepted, so nobody has to
read a Python exception to find their typo.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from uuid import UUID

_AGO = re.compile(r"(\d+)\s*([smhdw])", re.IGNORECASE)
_UNIT = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}
TIME_FORMS = "an ISO-8601 time with a zone, `now`, `today`, `yesterday`, or an age like 30m, 2h, 7d"
SHORT_ID_MIN = 4


class BadValue(ValueError):
    """A typed value that means nothing; the message names it and the accepted forms."""


def parse_when(value: str, flag: str, now: datetime | None = None) -> datetime:
    """A moment from ISO-8601 (with a zone), `now`, `today`/`yesterday` (UTC midnight),
    or an age (`90s`, `30m`, `2h`, `7d`, `1w`: that long before now)."""
    now = now or datetime.now(UTC)
    text = value.strip().lower()
    midnight = now.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    if text == "now":
        return now
    if text == "today":
        return midnight
    if text == "yesterday":
        return midnight - timedelta(days=1)
    if ago := _AGO.fullmatch(text):
        return now - timedelta(**{_UNIT[ago.group(2).lower()]: int(ago.group(1))})
    try:
        parsed = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
    except ValueError:
        raise BadValue(f"{flag} {value!r} is not a time: use {TIME_FORMS}") from None
    if parsed.tzinfo is None:
        raise BadValue(f"{flag} {value!r} needs a time zone (for example {value}Z)")
    return parsed


def resolve_session(value: str, flag: str, known: Iterable[str]) -> UUID:
    """A full session id, or the unambiguous start of one (the page shows 8 characters)."""
    text = value.strip().lower()
    try:
        return UUID(text)
    except ValueError:
        pass
    if len(text) < SHORT_ID_MIN or not re.fullmatch(r"[0-9a-f-]+", text):
        raise BadValue(
            f"{flag} {value!r} is not a session id: give the id or at least its first "
            f"{SHORT_ID_MIN} characters as shown on the operator page"
        )
    matches = sorted({k for k in known if k.lower().startswith(text)})
    if not matches:
        raise BadValue(f"{flag} {value!r}: no session id starts with it")
    if len(matches) > 1:
        raise BadValue(f"{flag} {value!r} is ambiguous: {', '.join(matches[:5])}")
    return UUID(matches[0])
