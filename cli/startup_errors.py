"""Start-up failures a setting would change, told as one line naming that setting.

`serve` and `worker` open their stores once the settings parsed; a data directory that
is a file, a workspace root that cannot be created or a database that cannot be reached
is a configuration error like a malformed value, not a traceback.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from infra.settings import Settings, SettingsError


def _within(path: str | None, root: Path) -> bool:
    if path is None:
        return False
    resolved, base = Path(path).resolve(), root.resolve()
    return resolved == base or base in resolved.parents


def _refuse(message: str) -> None:
    print(f"tachograph: configuration error: {message}", file=sys.stderr)
    raise SystemExit(2) from None


@contextmanager
def naming_the_setting() -> Iterator[None]:
    """Turn a failure to open what a setting names into one line naming the setting.

    The settings are read here, before the command removes its secrets from the
    environment; malformed ones are left for the command to report.
    """
    import psycopg
    from eventsourcing.persistence import OperationalError

    try:
        settings = Settings.from_env()
    except SettingsError:
        yield
        return
    try:
        yield
    except (psycopg.OperationalError, OperationalError) as exc:
        url = settings.database_url
        if url is None:
            raise
        reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        _refuse(
            f"TACHOGRAPH_DATABASE_URL: cannot reach the database {url.dbname} at "
            f"{url.host}:{url.port} ({reason})"
        )
    except OSError as exc:
        for name, root in (
            ("TACHOGRAPH_DATA_DIR", settings.data_dir),
            ("TACHOGRAPH_WORKSPACE_ROOT", settings.workspace_root),
        ):
            if _within(exc.filename, root):
                problem = (
                    "it is not a directory" if root.exists() and not root.is_dir() else exc.strerror
                )
                _refuse(f"{name}: cannot use {root} as a directory ({problem})")
        raise
