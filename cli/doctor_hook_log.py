"""`tachograph doctor`'s reading of the command hook's failure log (hook_client/command.py).

The hook notes each failed delivery in one per-user file, and one line when a delivery
gets through again; what matters is what failed since that last success. Failures are
counted by kind ("16 refused connections"), so a page of identical lines reads as one
finding.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from hook_client.command import LOG_ENV, LOG_FILE_NAME, hook_log_path

# Where hook clients of earlier releases wrote their log: the agent's working directory.
EARLIER_LOG: Final = Path("data") / LOG_FILE_NAME
# Failure kinds by what their error line says, first match wins; (pattern, singular, plural).
_KINDS: Final = (
    (
        re.compile(r"ConnectionRefused|Connection refused"),
        "refused connection",
        "refused connections",
    ),
    (re.compile(r"TimeoutError|timed out", re.IGNORECASE), "timeout", "timeouts"),
    (re.compile(r"answered HTTP (\d+)"), "HTTP {} answer", "HTTP {} answers"),
    (re.compile(r"^stdin "), "unreadable hook payload", "unreadable hook payloads"),
)


@dataclass(frozen=True)
class HookLogReport:
    """What the log says: failures since the last success (if any), and the last success."""

    path: Path
    failures: list[dict[str, Any]]
    last_success: str | None
    earlier_failures: int

    def failing(self) -> bool:
        return bool(self.failures)

    def summary(self) -> str:
        """One line: the failures by kind and the last of them, or that there are none."""
        if not self.failures:
            since = f" since the last success at {self.last_success}" if self.last_success else ""
            earlier = f"{self.earlier_failures} before it; " if self.earlier_failures else ""
            return f"no delivery failures{since} ({earlier}log: {self.path})"
        kinds = Counter(_kind(str(f.get("error", ""))) for f in self.failures)
        counted = ", ".join(_counted(n, kind) for kind, n in kinds.most_common())
        last = self.failures[-1]
        since = (
            f"since the last success at {self.last_success}"
            if self.last_success
            else "and no success since the log began"
        )
        return (
            f"{counted} {since}, last at {last.get('at')} ({last.get('error')}); "
            f"in {self.path}, cleared by the next delivery that gets through"
        )


def hook_log_path_for(env: Mapping[str, str]) -> Path:
    """The log the command hook writes for a user with this environment."""
    return Path(hook_log_path(env))


def read_hook_log(path: Path) -> HookLogReport | None:
    """The log's report, or None when there is no log (nothing has ever failed)."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return None
    failures: list[dict[str, Any]] = []
    earlier = 0
    last_success = None
    for entry in _entries(text.splitlines()):
        if entry.get("ok") is True:
            earlier += len(failures)
            failures = []
            last_success = str(entry.get("at"))
        else:
            failures.append(entry)
    return HookLogReport(path, failures, last_success, earlier)


def relative_log_setting(env: Mapping[str, str]) -> str | None:
    """A TACHOGRAPH_HOOK_LOG the hook ignores (relative: the agent's directory), or None."""
    value = env.get(LOG_ENV)
    if value and not Path(value).is_absolute():
        return (
            f"{LOG_ENV}={value!r} is relative, so the hook ignores it and writes "
            f"{hook_log_path({k: v for k, v in env.items() if k != LOG_ENV})}; give an "
            "absolute path"
        )
    return None


def earlier_logs(projects: Iterable[Path]) -> list[str]:
    """Failure logs that earlier hook clients left in project directories."""
    return [
        f"{path} was written by an earlier hook client into the agent's project; the hook "
        "no longer writes there: read it if you need to, then delete it"
        for project in projects
        if (path := project / EARLIER_LOG).is_file()
    ]


def _entries(lines: Iterable[str]) -> Iterable[dict[str, Any]]:
    for line in lines:
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
        except ValueError:
            entry = {"error": line.strip()}
        yield entry if isinstance(entry, dict) else {"error": line.strip()}


def _kind(error: str) -> tuple[str, str]:
    for pattern, one, many in _KINDS:
        match = pattern.search(error)
        if match:
            return one.format(*match.groups()), many.format(*match.groups())
    return "other failure", "other failures"


def _counted(n: int, kind: tuple[str, str]) -> str:
    return f"{n} {kind[0] if n == 1 else kind[1]}"
