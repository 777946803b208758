"""Settings from the environment: one object, parsed once, every error naming its variable."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from apscheduler.triggers.cron import CronTrigger

from domain.approval_rules import ApprovalRules
from domain.dispatch_facts import RECORD_FULL, RECORD_MODES
from domain.hook_config import HookConfig
from infra.approval_config_parser import parse_approval_rules
from infra.cpu_affinity import ALL, AUTO, allowed_cpus
from infra.hook_config_parser import HookConfigError, check_outbound_url, parse_hook_config
from infra.otel_settings import (
    DecisionExportSettings,
    OtelSettingsError,
    decision_export_settings,
)
from infra.reflector import ReflectorConfigError, parse_reflector_config
from infra.self_update_git.change import DEFAULT_LIMIT_BYTES as INSPECT_LIMIT_BYTES
from infra.witness_peers import WitnessPeer, parse_witnesses

SANDBOX_MODES = ("auto", "strict", "netns", "none")
SANDBOX_ALIASES = {"netns": "strict"}  # its name before the jail was more than a network


class SettingsError(ValueError):
    """A missing or malformed setting; the message names the variable."""


@dataclass(frozen=True)
class DatabaseURL:
    """Parsed TACHOGRAPH_DATABASE_URL."""

    host: str
    port: int
    dbname: str
    user: str
    password: str

    def conninfo(self) -> str:
        """libpq keyword string for psycopg."""
        parts = {
            "host": self.host,
            "port": str(self.port),
            "dbname": self.dbname,
            "user": self.user,
            "password": self.password,
        }
        return " ".join(f"{k}='{v}'" for k, v in parts.items() if v)


@dataclass(frozen=True)
class Settings:
    """Everything configurable; tests build their own instead of touching os.environ."""

    data_dir: Path = Path("data")
    database_url: DatabaseURL | None = None
    database_schema: str = "public"
    # PostgreSQL pools per process: log N (+2N overflow), read models 2N connections.
    database_pool_size: int = 5
    api_key: str | None = None
    hooks_json: str | None = None
    hook_allowed_hosts: frozenset[str] = frozenset()
    hook_allow_insecure_loopback: bool = False
    redacted_tools: frozenset[str] = frozenset({"storeSecret", "recallSecret", "updateSecret"})
    # full: each dispatch records the call's bounded facts; metadata: names only.
    record: str = RECORD_FULL
    # Gemini CLI's model-call events (BeforeModel, AfterModel, BeforeToolSelection, an
    # `auto` PreCompress): `drop` (not recorded at all) or `store` (observational events).
    gemini_model_events: str = "drop"
    workspace_root: Path = Path("workspace")
    task_command: tuple[str, ...] | None = None
    task_concurrency: int = 2
    task_timeout_s: float = 1800.0
    # SIGTERM → SIGKILL grace for a stopped task, and how often workers look for due work.
    task_kill_grace_s: float = 10.0
    task_poll_interval_s: float = 1.0
    timezone: str = "UTC"
    no_signal_grace_s: float = 120.0
    coder_hook_secret: str | None = None
    coder_hook_url: str | None = None
    coder_hook_issuer: str | None = None
    coder_hook_timeout_ms: int = 1500
    reflector: str = "rules"
    # Autonomy jobs (SPEC §8): signal worker cadence, batch and claim expiry; the idle
    # self-update job and reconcile cadence; the cron of system self-update schedules.
    reflection_interval_s: float = 5.0
    reflection_batch: int = 20
    signal_claim_ttl_s: float = 300.0
    self_update_idle_interval_s: float = 15.0
    self_update_reconcile_interval_s: float = 60.0
    self_update_cron: str = "0 * * * *"
    # Server variables a self-update agent may have beyond PATH, LANG, LC_ALL and TZ
    # (e.g. its model provider's endpoint and key); nothing else reaches it.
    self_update_env: tuple[str, ...] = ()
    # Who reviews a cycle's patch: a second agent run (`agent`) or a person through
    # POST /api/tasks/{id}/review (`operator`), within the timeout.
    self_update_review: str = "agent"
    self_update_review_timeout_s: float = 3600.0
    # The largest patch an agent reviewer is shown, whole (a larger one fails the cycle
    # before review); at most the inspect limit, and small enough for one argument.
    self_update_review_max_bytes: int = 64 * 1024
    # The agent's jail (infra/jail.py): `strict` (every isolation item must hold, or the
    # cycle fails; `netns` is its earlier name), `auto` (what the machine allows, recorded
    # item by item) or `none` (the host's network and file system).
    self_update_sandbox: str = "auto"
    self_update_forward: tuple[int, ...] = ()
    log_signing_key: str | None = None
    # The Ed25519 key signing the log's checkpoints (C2SP signed notes); None: under
    # data_dir. Created on first start if absent. A note at most every N events or T s.
    log_note_key_file: Path | None = None
    log_note_every_events: int = 1000
    log_note_every_s: float = 10.0
    # Witnesses asked to cosign each new signed checkpoint (TACHOGRAPH_WITNESSES).
    witnesses: tuple[WitnessPeer, ...] = ()
    url: str = "http://127.0.0.1:8000"
    # Log level of the JSON logs, and one line per HTTP request (route template, status, ms).
    log_level: str = "INFO"
    access_log: bool = False
    # `serve`'s CPU: `auto` (one of the allowed CPUs), `all` (no pinning) or a CPU number.
    serve_cpu: str = "auto"
    # `serve` runs the OTLP receiver in a process of its own on this port (None: exports
    # are taken on the main port only, beside the hooks).
    otlp_port: int | None = None
    # Whether this process's appends to a SQLite log take turns with another process's
    # through a lock file (infra/sqlite_recorder.py): serve and the OTLP receiver process
    # it starts do; a process that appends alone does not.
    sqlite_writer_turns: bool = False
    # Where `serve` applies the log to the read models: `process` (a process of its own,
    # cli/projections_process.py) or `thread` (a thread of serve's).
    projections: str = "process"
    # How long a read (or a command) waits for the read models to reach a position.
    read_wait_s: float = 5.0
    # Secrets named by hook handlers' secretEnv, captured at start-up.
    secrets: Mapping[str, str] = field(default_factory=dict)
    hooks: HookConfig = field(default_factory=HookConfig.empty)
    # Tool calls that wait for an operator's decision (TACHOGRAPH_APPROVALS).
    approvals: ApprovalRules = field(default_factory=ApprovalRules)
    # Where each new approval request is posted (TACHOGRAPH_APPROVAL_NOTIFY), and the
    # variable holding the secret it is signed with (TACHOGRAPH_APPROVAL_NOTIFY_SECRET_ENV).
    approval_notify_url: str | None = None
    approval_notify_secret_env: str | None = None
    # How often a replica holding requests reads the log for decisions made elsewhere
    # (TACHOGRAPH_APPROVAL_POLL_S): on PostgreSQL the safety net behind LISTEN/NOTIFY.
    approval_poll_s: float = 0.05
    # How long `serve` waits for a request's headers, and then for its whole body,
    # before it answers 408 and closes the connection (api/read_deadlines.py).
    http_header_timeout_s: float = 10.0
    http_body_timeout_s: float = 30.0
    # Each hook decision out as an OpenTelemetry span (OTEL_EXPORTER_OTLP_*); None: off.
    decision_export: DecisionExportSettings | None = None

    @property
    def sqlite_path(self) -> Path:
        return self.data_dir / "tachograph.sqlite"

    @property
    def readmodel_sqlite_path(self) -> Path:
        # Read models live in their own file so projection writes never hold the
        # event log's single SQLite write lock against the ingest path.
        return self.data_dir / "readmodels.sqlite"

    @property
    def note_key_path(self) -> Path:
        return self.log_note_key_file or self.data_dir / "log-note.key"

    def secret_values(self) -> list[str | None]:
        """Values no log line may contain."""
        url = self.database_url
        return [
            self.api_key,
            self.coder_hook_secret,
            self.log_signing_key,
            url.password if url is not None else None,
            *self.secrets.values(),
        ]

    def with_(self, **changes: Any) -> Settings:
        """A copy with some fields changed."""
        return replace(self, **changes)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        """Parse settings; raise SettingsError naming the first bad variable."""
        env = os.environ if environ is None else environ
        get = _Reader(env)
        hooks_json = get.text("TACHOGRAPH_HOOKS")
        allowed_hosts = frozenset(get.csv("TACHOGRAPH_HOOK_ALLOWED_HOSTS"))
        insecure_loopback = get.flag("TACHOGRAPH_HOOK_ALLOW_INSECURE_LOOPBACK")
        otlp_port = get.port("TACHOGRAPH_OTLP_PORT")
        try:
            hooks = parse_hook_config(
                hooks_json, allowed_hosts=allowed_hosts, allow_insecure_loopback=insecure_loopback
            )
        except HookConfigError as exc:
            raise SettingsError(f"TACHOGRAPH_HOOKS: {exc}") from None
        try:
            approvals = parse_approval_rules(get.text("TACHOGRAPH_APPROVALS"))
        except HookConfigError as exc:
            raise SettingsError(f"TACHOGRAPH_APPROVALS: {exc}") from None
        notify_url = get.text("TACHOGRAPH_APPROVAL_NOTIFY")
        if notify_url is not None:
            try:
                notify_url = check_outbound_url(
                    notify_url,
                    "url",
                    allowed_hosts=allowed_hosts,
                    allow_insecure_loopback=insecure_loopback,
                )
            except HookConfigError as exc:
                raise SettingsError(f"TACHOGRAPH_APPROVAL_NOTIFY: {exc}") from None
        notify_secret = get.text("TACHOGRAPH_APPROVAL_NOTIFY_SECRET_ENV")
        if notify_secret is not None and not env.get(notify_secret):
            raise SettingsError(
                f"{notify_secret}: named by TACHOGRAPH_APPROVAL_NOTIFY_SECRET_ENV but not set"
            )
        coder_secret = get.secret("TACHOGRAPH_CODER_HOOK_SECRET", min_bytes=32)
        coder_url = get.http_url("TACHOGRAPH_CODER_HOOK_URL")
        _check_pair(env, "TACHOGRAPH_CODER_HOOK_SECRET", "TACHOGRAPH_CODER_HOOK_URL")
        reflector = get.text("TACHOGRAPH_REFLECTOR") or "rules"
        sandbox = get.choice("TACHOGRAPH_SELF_UPDATE_SANDBOX", SANDBOX_MODES, "auto").lower()
        try:
            reflector_secret = parse_reflector_config(
                reflector, allowed_hosts=allowed_hosts, allow_insecure_loopback=insecure_loopback
            ).secret_env
        except ReflectorConfigError as exc:
            raise SettingsError(f"TACHOGRAPH_REFLECTOR: {exc}") from None
        if reflector_secret and not env.get(reflector_secret):
            raise SettingsError(
                f"{reflector_secret}: named by the reflector's secretEnv but not set"
            )
        missing = sorted(n for n in hooks.secret_env_names() if not env.get(n))
        if missing:
            raise SettingsError(f"{missing[0]}: named by a hook's secretEnv but not set")
        secrets = {name: env[name] for name in hooks.secret_env_names()}
        if reflector_secret:
            secrets[reflector_secret] = env[reflector_secret]
        if notify_secret:
            secrets[notify_secret] = env[notify_secret]
        return cls(
            data_dir=Path(get.text("TACHOGRAPH_DATA_DIR") or "data"),
            database_url=get.database_url("TACHOGRAPH_DATABASE_URL"),
            database_schema=get.identifier("TACHOGRAPH_DATABASE_SCHEMA") or "public",
            database_pool_size=int(get.number("TACHOGRAPH_DATABASE_POOL_SIZE", 5, 1, 100, int)),
            api_key=get.text("TACHOGRAPH_API_KEY"),
            hooks_json=hooks_json,
            hooks=hooks,
            approvals=approvals,
            approval_notify_url=notify_url,
            approval_notify_secret_env=notify_secret,
            approval_poll_s=get.number("TACHOGRAPH_APPROVAL_POLL_S", 0.05, 0.01, 60, float),
            hook_allowed_hosts=allowed_hosts,
            hook_allow_insecure_loopback=insecure_loopback,
            record=get.choice("TACHOGRAPH_RECORD", RECORD_MODES, RECORD_FULL).lower(),
            gemini_model_events=get.choice(
                "TACHOGRAPH_GEMINI_MODEL_EVENTS", ("drop", "store"), "drop"
            ).lower(),
            redacted_tools=frozenset(
                get.csv("TACHOGRAPH_REDACTED_TOOLS", "storeSecret,recallSecret,updateSecret")
            ),
            workspace_root=Path(get.text("TACHOGRAPH_WORKSPACE_ROOT") or "workspace"),
            task_command=get.argv("TACHOGRAPH_TASK_COMMAND"),
            task_concurrency=int(get.number("TACHOGRAPH_TASK_CONCURRENCY", 2, 1, 64, int)),
            task_timeout_s=get.number("TACHOGRAPH_TASK_TIMEOUT_S", 1800, 1, 7 * 86400, float),
            task_kill_grace_s=get.number("TACHOGRAPH_TASK_KILL_GRACE_S", 10, 0.1, 600, float),
            task_poll_interval_s=get.number("TACHOGRAPH_TASK_POLL_S", 1, 0.05, 60, float),
            timezone=get.timezone("TACHOGRAPH_TIMEZONE"),
            no_signal_grace_s=get.number("TACHOGRAPH_NO_SIGNAL_GRACE_S", 120, 0, 86400, float),
            coder_hook_secret=coder_secret,
            coder_hook_url=coder_url,
            coder_hook_issuer=get.text("TACHOGRAPH_CODER_HOOK_ISSUER"),
            coder_hook_timeout_ms=int(
                get.number("TACHOGRAPH_CODER_HOOK_TIMEOUT_MS", 1500, 100, 60000, int)
            ),
            reflector=reflector,
            reflection_interval_s=get.number(
                "TACHOGRAPH_REFLECTION_INTERVAL_S", 5, 0.05, 3600, float
            ),
            self_update_idle_interval_s=get.number(
                "TACHOGRAPH_SELF_UPDATE_IDLE_S", 15, 0.05, 3600, float
            ),
            self_update_cron=get.cron("TACHOGRAPH_SELF_UPDATE_CRON", "0 * * * *"),
            self_update_env=get.variable_names("TACHOGRAPH_SELF_UPDATE_ENV"),
            self_update_review=get.choice(
                "TACHOGRAPH_SELF_UPDATE_REVIEW", ("agent", "operator"), "agent"
            ).lower(),
            self_update_review_timeout_s=get.number(
                "TACHOGRAPH_SELF_UPDATE_REVIEW_TIMEOUT_S", 3600, 1, 7 * 86400, float
            ),
            self_update_review_max_bytes=get.review_max_bytes(
                "TACHOGRAPH_SELF_UPDATE_REVIEW_MAX_BYTES", 64 * 1024
            ),
            self_update_sandbox=SANDBOX_ALIASES.get(sandbox, sandbox),
            self_update_forward=get.ports("TACHOGRAPH_SELF_UPDATE_FORWARD"),
            log_signing_key=get.text("TACHOGRAPH_LOG_SIGNING_KEY"),
            log_note_key_file=_path_or_none(get.text("TACHOGRAPH_LOG_NOTE_KEY_FILE")),
            log_note_every_events=int(
                get.number("TACHOGRAPH_LOG_NOTE_EVERY_EVENTS", 1000, 1, 1_000_000, int)
            ),
            log_note_every_s=get.number("TACHOGRAPH_LOG_NOTE_EVERY_S", 10, 0.1, 86400, float),
            witnesses=get.witnesses("TACHOGRAPH_WITNESSES"),
            url=get.http_url("TACHOGRAPH_URL") or "http://127.0.0.1:8000",
            log_level=get.choice(
                "TACHOGRAPH_LOG_LEVEL", ("debug", "info", "warning", "error"), "info"
            ),
            access_log=get.flag("TACHOGRAPH_ACCESS_LOG"),
            serve_cpu=get.cpu("TACHOGRAPH_SERVE_CPU"),
            otlp_port=otlp_port,
            sqlite_writer_turns=otlp_port is not None,  # the receiver appends beside serve
            projections=get.choice(
                "TACHOGRAPH_PROJECTIONS", ("process", "thread"), "process"
            ).lower(),
            http_header_timeout_s=get.number(
                "TACHOGRAPH_HTTP_HEADER_TIMEOUT_S", 10, 0.1, 3600, float
            ),
            http_body_timeout_s=get.number("TACHOGRAPH_HTTP_BODY_TIMEOUT_S", 30, 0.1, 3600, float),
            secrets=secrets,
            decision_export=_decision_export(env, get),
        )


def _decision_export(env: Mapping[str, str], get: _Reader) -> DecisionExportSettings | None:
    try:
        return decision_export_settings(env, get.number)
    except OtelSettingsError as exc:
        raise SettingsError(str(exc)) from None


def _check_pair(env: Mapping[str, str], first: str, second: str) -> None:
    """Two settings that only work together: one without the other is a mistake, not off."""
    present = [name for name in (first, second) if (env.get(name) or "").strip()]
    if len(present) == 1:
        missing = second if present == [first] else first
        raise SettingsError(f"{missing}: must be set too, since {present[0]} is set")


_VARIABLE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class _Reader:
    def __init__(self, env: Mapping[str, str]) -> None:
        self.env = env

    def text(self, name: str) -> str | None:
        value = self.env.get(name)
        if value is None or value.strip() == "":
            return None
        return value.strip()

    def csv(self, name: str, default: str = "") -> list[str]:
        raw = self.env.get(name, default)
        return [part.strip() for part in raw.split(",") if part.strip()]

    def variable_names(self, name: str) -> tuple[str, ...]:
        names = self.csv(name)
        for part in names:
            if not _VARIABLE_NAME.match(part):
                raise SettingsError(f"{name}: expected variable names, got {part!r}")
        return tuple(names)

    def http_url(self, name: str) -> str | None:
        raw = self.text(name)
        if raw is None:
            return None
        try:
            parts = urlsplit(raw)
            parts.port  # noqa: B018 - reading the port validates it
        except ValueError:
            raise SettingsError(f"{name}: not a valid URL, got {raw!r}") from None
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise SettingsError(f"{name}: expected an http:// or https:// URL, got {raw!r}")
        return raw

    def witnesses(self, name: str) -> tuple[WitnessPeer, ...]:
        try:
            return parse_witnesses(self.text(name) or "")
        except ValueError as exc:
            raise SettingsError(f"{name}: {exc}") from None

    def ports(self, name: str) -> tuple[int, ...]:
        ports = []
        for part in self.csv(name):
            if not part.isdigit() or not 1 <= int(part) <= 65535:
                raise SettingsError(f"{name}: expected loopback port numbers, got {part!r}")
            ports.append(int(part))
        return tuple(sorted(set(ports)))

    def port(self, name: str) -> int | None:
        raw = self.text(name)
        if raw is None:
            return None
        if not (raw.isascii() and raw.isdigit()) or not 1 <= int(raw) <= 65535:
            raise SettingsError(f"{name}: expected a port number (1-65535), got {raw!r}")
        return int(raw)

    def flag(self, name: str) -> bool:
        raw = (self.env.get(name) or "0").strip().lower()
        if raw in ("1", "true", "yes"):
            return True
        if raw in ("0", "false", "no", ""):
            return False
        raise SettingsError(f"{name}: expected 1 or 0, got {raw!r}")

    def number(self, name: str, default: float, lo: float, hi: float, kind: type) -> float:
        raw = self.text(name)
        if raw is None:
            return default
        try:
            value = kind(raw)
        except ValueError:
            raise SettingsError(f"{name}: expected a number, got {raw!r}") from None
        if not lo <= value <= hi:
            raise SettingsError(f"{name}: must be between {lo:g} and {hi:g}, got {raw}")
        return float(value)

    def review_max_bytes(self, name: str, default: int) -> int:
        raw = self.text(name)
        if raw is None:
            return default
        if not (raw.isascii() and raw.isdigit()):
            raise SettingsError(f"{name}: expected a number of bytes, got {raw!r}")
        if int(raw) > INSPECT_LIMIT_BYTES:
            raise SettingsError(
                f"{name}: must not exceed the patch inspection's limit of "
                f"{INSPECT_LIMIT_BYTES} bytes, got {raw}"
            )
        if int(raw) < 1024:
            raise SettingsError(f"{name}: must be at least 1024 bytes, got {raw}")
        return int(raw)

    def choice(self, name: str, allowed: tuple[str, ...], default: str) -> str:
        raw = (self.text(name) or default).lower()
        if raw not in allowed:
            raise SettingsError(f"{name}: expected one of {', '.join(allowed)}, got {raw!r}")
        return raw.upper()

    def cpu(self, name: str) -> str:
        raw = (self.text(name) or AUTO).lower()
        if raw not in (AUTO, ALL) and not raw.isdigit():
            raise SettingsError(f"{name}: expected auto, all or a CPU number, got {raw!r}")
        allowed = allowed_cpus()
        if raw.isdigit() and allowed is not None and int(raw) not in allowed:
            raise SettingsError(f"{name}: CPU {raw} is not one this process may use")
        return raw

    def cron(self, name: str, default: str) -> str:
        raw = self.text(name) or default
        try:
            CronTrigger.from_crontab(raw)
        except ValueError as exc:
            raise SettingsError(f"{name}: not a five-field cron expression ({exc})") from None
        return raw

    def identifier(self, name: str) -> str | None:
        raw = self.text(name)
        if raw is not None and not raw.replace("_", "a").isalnum():
            raise SettingsError(f"{name}: must be letters, digits and underscores, got {raw!r}")
        return raw

    def timezone(self, name: str) -> str:
        raw = self.text(name) or "UTC"
        try:
            ZoneInfo(raw)
        except (ZoneInfoNotFoundError, ValueError):
            raise SettingsError(f"{name}: unknown timezone {raw!r}") from None
        return raw

    def secret(self, name: str, *, min_bytes: int) -> str | None:
        raw = self.env.get(name)
        if raw is None or raw == "":
            return None
        if len(raw.encode()) < min_bytes:
            raise SettingsError(f"{name}: must be at least {min_bytes} bytes long")
        return raw

    def argv(self, name: str) -> tuple[str, ...] | None:
        raw = self.text(name)
        if raw is None:
            return None
        try:
            value = json.loads(raw)
        except json.JSONDecodeError:
            raise SettingsError(f"{name}: must be a JSON array of strings") from None
        if not (isinstance(value, list) and value and all(isinstance(v, str) for v in value)):
            raise SettingsError(f"{name}: must be a non-empty JSON array of strings")
        return tuple(value)

    def database_url(self, name: str) -> DatabaseURL | None:
        raw = self.text(name)
        if raw is None:
            return None
        try:
            parts = urlsplit(raw)
            port = parts.port or 5432
        except ValueError:
            raise SettingsError(f"{name}: not a valid URL") from None
        if parts.scheme not in ("postgresql", "postgres"):
            raise SettingsError(f"{name}: must start with postgresql://")
        dbname = parts.path.lstrip("/")
        if not parts.hostname or not dbname:
            raise SettingsError(f"{name}: must name a host and a database")
        return DatabaseURL(
            host=parts.hostname,
            port=port,
            dbname=unquote(dbname),
            user=unquote(parts.username or "postgres"),
            # libpq's own fallback, made explicit: serve and worker remove PGPASSWORD from
            # their environment once it is read (infra/secret_env.py).
            password=unquote(parts.password or "") or self.env.get("PGPASSWORD", ""),
        )


def _path_or_none(text: str | None) -> Path | None:
    return Path(text) if text else None
