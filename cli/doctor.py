"""`tachograph doctor`: one line per check, non-zero exit when any fails.

A risky but working setup gets one `WARN` line per finding instead of the `ok` line; like
the other non-fatal findings (no executor, no managed hooks) it keeps the exit code 0.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Final

from cli.claude_settings import (
    ADMIN_KEY_ENV,
    AGENT_TOKEN_ENV,
    SETTINGS_RELATIVE_PATH,
    count_admin_key_hooks,
)
from cli.doctor_runtimes import project_dirs
from infra.settings import Settings, SettingsError

AGENT_TOKEN_FIX: Final = (
    "give agents a token from `tachograph keys issue --role agent --session ID` "
    f"in {AGENT_TOKEN_ENV} instead"
)
OPEN_API_WARNING: Final = (
    f"{ADMIN_KEY_ENV} is unset, so the API is open: any local process, including governed "
    f"agents, can call every route; set {ADMIN_KEY_ENV} (the admin key) on the server and give "
    f"agents tokens from `tachograph keys issue --role agent --session ID` in {AGENT_TOKEN_ENV}"
)
# Where Claude Code reads hooks in a project: `hook install` writes the first.
PROJECT_SETTINGS: Final = (SETTINGS_RELATIVE_PATH, Path(".claude") / "settings.json")
USER_SETTINGS: Final = Path(".claude") / "settings.json"


@dataclass(frozen=True)
class Warnings:
    """Non-fatal findings of a check, each naming the problem and its fix."""

    findings: tuple[str, ...]


@dataclass(frozen=True)
class Scope:
    """What some checks look at beyond the settings: the raw environment (copies of keys
    hide there; the hook log's place depends on it) and the project directories named."""

    env: Mapping[str, str]
    projects: tuple[Path, ...] = ()


Check = Callable[[Settings], str | Warnings]
ScopedCheck = Callable[[Settings, Scope], str | Warnings]


class CheckFailed(Exception):
    """A check found a problem; the message says what to fix."""


def check_database(settings: Settings) -> str:
    """The log must already be there: a doctor run in the wrong directory creates nothing."""
    from cli.log_presence import NoLog, require_log

    try:
        require_log(settings)
    except NoLog as exc:
        raise CheckFailed(str(exc)) from None
    url = settings.database_url
    if url is None:
        return f"SQLite at {settings.sqlite_path}"
    return f"PostgreSQL at {url.host}:{url.port}/{url.dbname}, schema {settings.database_schema}"


def check_hooks(settings: Settings) -> str:
    handlers = sum(len(h) for h in settings.hooks.handlers.values())
    if not handlers:
        return "no managed hooks configured"
    return f"{handlers} handler(s) on {len(settings.hooks.handlers)} event(s), configuration valid"


def check_holds(settings: Settings, scope: Scope) -> str:
    """No installed hook may stop waiting before the longest hold can end: the runtime
    would run the held call undecided (cli/hook_waits.py)."""
    from cli.hook_waits import search_directories, short_hook_findings
    from domain.approval_rules import longest_hold_s

    hold = longest_hold_s(settings.approvals, settings.hooks.handlers)
    if hold == 0:
        return "no approval rule or handler can hold a call"
    directories = [*search_directories(settings.workspace_root, scope.env), *scope.projects]
    findings = short_hook_findings(hold, dict.fromkeys(directories))
    if findings:
        raise CheckFailed("; ".join(findings))
    return f"installed hooks wait longer than the longest hold ({hold} s)"


def check_executor(settings: Settings) -> str:
    argv = settings.task_command
    if argv is None:
        return "none (TACHOGRAPH_TASK_COMMAND unset: tasks stay queued)"
    program = argv[0]
    found = shutil.which(program)
    if found is None:
        raise CheckFailed(f"TACHOGRAPH_TASK_COMMAND runs {program!r}, which is not on PATH")
    return f"{program} -> {found}"


def check_path(settings: Settings) -> str | Warnings:
    """Which `tachograph` a shell runs. Installed hooks never need it: they run this
    installation's hook client by absolute path (cli/runtime_hooks.py `hook_command`);
    hooks of earlier releases that call it by name are the runtimes check's business."""
    found = shutil.which("tachograph")
    running = Path(sys.executable).parent / "tachograph"
    if found is None:
        return f"not on PATH (installed hooks do not need it); this installation's is {running}"
    if running.exists() and os.path.realpath(found) != os.path.realpath(running):
        return Warnings(
            (
                f"`tachograph` on PATH is {found}, not this installation ({running}): hooks "
                "installed with it run that installation's hook client",
            )
        )
    return found


def check_hooks_log(settings: Settings, scope: Scope) -> str | Warnings:
    """The command hook's failure log: failures since its last success fail the check."""
    from cli.doctor_hook_log import (
        earlier_logs,
        hook_log_path_for,
        read_hook_log,
        relative_log_setting,
    )

    path = hook_log_path_for(scope.env)
    report = read_hook_log(path)
    if report is not None and report.failing():
        raise CheckFailed(report.summary())
    findings = [
        *filter(None, [relative_log_setting(scope.env)]),
        *earlier_logs(project_dirs(settings, scope.projects)),
    ]
    if findings:
        return Warnings(tuple(findings))
    return report.summary() if report is not None else f"no delivery failures logged ({path})"


def check_credentials(settings: Settings, scope: Scope) -> str | Warnings:
    """Warn where the bootstrap admin key reaches agents, or when no key guards the API."""
    env = scope.env
    files = _claude_settings_files(settings, scope)
    findings = _admin_key_exports(settings, env)
    for path, project in files:
        findings += _settings_file_findings(path, project, settings.api_key)
    if findings:
        return Warnings(tuple(findings))
    return (
        "admin key not handed to agents (task command, environment, "
        f"{len(files)} Claude Code settings file(s) checked)"
    )


def check_agent_hooks(settings: Settings, scope: Scope) -> str | Warnings:
    """Each runtime's hook file: registered, resolvable, and reaching a server."""
    from cli.doctor_runtimes import runtime_hook_findings

    missing = [str(p) for p in scope.projects if not p.is_dir()]
    if missing:
        raise CheckFailed(f"not a directory: {', '.join(missing)}")
    findings, summary = runtime_hook_findings(settings, scope.env, scope.projects)
    return Warnings(tuple(findings)) if findings else summary


def _admin_key_exports(settings: Settings, env: Mapping[str, str]) -> list[str]:
    """Find copies of the admin key in the task command and the environment agents inherit."""
    key = settings.api_key
    if key is None:
        return [OPEN_API_WARNING]
    findings = [
        f"TACHOGRAPH_TASK_COMMAND[{index}] contains the admin key ({ADMIN_KEY_ENV}), so every "
        f"task agent receives it; remove it and {AGENT_TOKEN_FIX}"
        for index, arg in enumerate(settings.task_command or ())
        if key in arg
    ]
    # The executor strips TACHOGRAPH_API_KEY itself; a copy under another name gets through,
    # and so does anything inherited by an agent started from this shell.
    findings += [
        f"{name} holds a copy of the admin key (the value of {ADMIN_KEY_ENV}), which agents "
        f"started from this environment inherit; keep the admin key in {ADMIN_KEY_ENV} only "
        f"and {AGENT_TOKEN_FIX}"
        for name in sorted(env)
        if name != ADMIN_KEY_ENV and env[name].strip() == key
    ]
    return findings


def _claude_settings_files(settings: Settings, scope: Scope) -> list[tuple[Path, Path | None]]:
    """Return existing Claude Code settings files with their project dir (None: user file)."""
    candidates: list[tuple[Path, Path | None]] = [
        (project / relative, project)
        for project in project_dirs(settings, scope.projects)
        for relative in PROJECT_SETTINGS
    ]
    if scope.env.get("HOME"):
        candidates.append((Path(scope.env["HOME"]) / USER_SETTINGS, None))
    unique: dict[Path, tuple[Path, Path | None]] = {}
    for path, project in candidates:
        if path.is_file():
            unique.setdefault(path.resolve(), (path, project))
    return list(unique.values())


def _settings_file_findings(path: Path, project: Path | None, key: str | None) -> list[str]:
    """Find the admin key, or hooks that send it, in one Claude Code settings file."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        return [f"cannot read {path} to check it for the admin key: {exc.strerror or exc}"]
    findings = []
    if key is not None and _contains(text, key):
        findings.append(
            f"{path} contains the admin key (the value of {ADMIN_KEY_ENV}), which Claude Code "
            f"hands to the agent; remove it and {AGENT_TOKEN_FIX}"
        )
    hooks = count_admin_key_hooks(_json_or_none(text))
    if hooks:
        findings.append(
            f"{path} has {hooks} Tachograph hook(s) that send {ADMIN_KEY_ENV}, the admin key; "
            f"{_reinstall_hint(path, project)} and {AGENT_TOKEN_FIX}"
        )
    return findings


def _contains(text: str, key: str) -> bool:
    """Tell whether the key appears in JSON text, raw or as a JSON string escapes it."""
    return key in text or json.dumps(key)[1:-1] in text


def _json_or_none(text: str) -> object:
    """Parse JSON text; an unparsable file has no hooks Claude Code would run."""
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return None


def _reinstall_hint(path: Path, project: Path | None) -> str:
    """Say how to replace old hooks: `hook install` rewrites only settings.local.json."""
    target = shlex.quote(str(project)) if project is not None else "<project dir>"
    install = f"re-run `tachograph hook install claude {target}`"
    if path.name == SETTINGS_RELATIVE_PATH.name:
        return install
    return f"remove them from this file, {install}"


CHECKS: list[tuple[str, Check]] = [
    ("database", check_database),
    ("hooks", check_hooks),
    ("executor", check_executor),
    ("path", check_path),
]
# Checks that read the environment or the project directories; they run after the rest.
SCOPED_CHECKS: list[tuple[str, ScopedCheck]] = [
    ("credentials", check_credentials),
    ("runtimes", check_agent_hooks),
    ("holds", check_holds),
    ("hooks.log", check_hooks_log),
]


def run_doctor(
    out: IO[str],
    environ: Mapping[str, str] | None = None,
    data_dir: Path | None = None,
    projects: Sequence[Path] = (),
) -> int:
    """Run every check; return 0 when all pass."""
    try:
        settings = Settings.from_env(environ)
    except SettingsError as exc:
        print(f"FAIL settings: {exc}", file=out)
        return 1
    if data_dir is not None:
        settings = settings.with_(data_dir=data_dir)
    print("ok   settings: environment parsed", file=out)
    scope = Scope(os.environ if environ is None else environ, tuple(projects))
    checks: list[tuple[str, Check]] = [
        *CHECKS,
        *((name, _scoped(check, scope)) for name, check in SCOPED_CHECKS),
    ]
    failed = 0
    for name, check in checks:
        try:
            detail = check(settings)
        except CheckFailed as exc:
            failed += 1
            print(f"FAIL {name}: {exc}", file=out)
        except Exception as exc:  # noqa: BLE001 - a doctor reports, it does not crash
            failed += 1
            print(f"FAIL {name}: {type(exc).__name__}: {exc}", file=out)
        else:
            _report(out, name, detail)
    return 1 if failed else 0


def _scoped(check: ScopedCheck, scope: Scope) -> Check:
    return lambda settings: check(settings, scope)


def _report(out: IO[str], name: str, detail: str | Warnings) -> None:
    """Print a passed check's line, or one warning line per finding."""
    if isinstance(detail, str):
        print(f"ok   {name}: {detail}", file=out)
        return
    for finding in detail.findings:
        print(f"WARN {name}: {finding}", file=out)
