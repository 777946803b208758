"""`tachograph doctor`: one line per check, non-zero exit when any fails."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sqlite3
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO

from infra.settings import Settings, SettingsError

Check = Callable[[Settings], str]


class CheckFailed(Exception):
    """A check found a problem; the message says what to fix."""


def check_database(settings: Settings) -> str:
    url = settings.database_url
    if url is None:
        settings.data_dir.mkdir(parents=True, exist_ok=True)
        with sqlite3.connect(settings.sqlite_path, timeout=3) as conn:
            conn.execute("SELECT 1")
        return f"SQLite at {settings.sqlite_path}"
    import psycopg

    try:
        with psycopg.connect(url.conninfo(), connect_timeout=3) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error as exc:
        raise CheckFailed(f"PostgreSQL at {url.host}:{url.port}/{url.dbname}: {exc}") from None
    return f"PostgreSQL at {url.host}:{url.port}/{url.dbname}, schema {settings.database_schema}"


def check_hooks(settings: Settings) -> str:
    handlers = sum(len(h) for h in settings.hooks.handlers.values())
    if not handlers:
        return "no managed hooks configured"
    return f"{handlers} handler(s) on {len(settings.hooks.handlers)} event(s), configuration valid"


def check_hooks_log(settings: Settings) -> str:
    path = settings.data_dir / "hooks.log"
    if not path.exists():
        return "no delivery failures logged"
    day_ago = time.time() - 86400
    recent = [line for line in path.read_text(errors="replace").splitlines() if line.strip()]
    if path.stat().st_mtime < day_ago or not recent:
        return f"no delivery failures in the last 24 h ({path})"
    last = recent[-1]
    with contextlib.suppress(json.JSONDecodeError, AttributeError):
        last = json.loads(last).get("error", last)
    raise CheckFailed(f"{len(recent)} command-hook delivery failure(s) in {path}; last: {last}")


def check_executor(settings: Settings) -> str:
    argv = settings.task_command
    if argv is None:
        return "none (TACHOGRAPH_TASK_COMMAND unset: tasks stay queued)"
    program = argv[0]
    found = shutil.which(program)
    if found is None:
        raise CheckFailed(f"TACHOGRAPH_TASK_COMMAND runs {program!r}, which is not on PATH")
    return f"{program} -> {found}"


def check_path(settings: Settings) -> str:
    found = shutil.which("tachograph")
    running = Path(sys.executable).parent / "tachograph"
    if found is None:
        raise CheckFailed("no `tachograph` on PATH: Claude Code command hooks call it by name")
    if running.exists() and os.path.realpath(found) != os.path.realpath(running):
        raise CheckFailed(f"`tachograph` on PATH is {found}, not this installation ({running})")
    return found


CHECKS: list[tuple[str, Check]] = [
    ("database", check_database),
    ("hooks", check_hooks),
    ("hooks.log", check_hooks_log),
    ("executor", check_executor),
    ("path", check_path),
]


def run_doctor(out: IO[str], environ: dict[str, str] | None = None) -> int:
    """Run every check; return 0 when all pass."""
    try:
        settings = Settings.from_env(environ)
    except SettingsError as exc:
        print(f"FAIL settings: {exc}", file=out)
        return 1
    print("ok   settings: environment parsed", file=out)
    failed = 0
    for name, check in CHECKS:
        try:
            detail = check(settings)
        except CheckFailed as exc:
            failed += 1
            print(f"FAIL {name}: {exc}", file=out)
        except Exception as exc:  # noqa: BLE001 - a doctor reports, it does not crash
            failed += 1
            print(f"FAIL {name}: {type(exc).__name__}: {exc}", file=out)
        else:
            print(f"ok   {name}: {detail}", file=out)
    return 1 if failed else 0
