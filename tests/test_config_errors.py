"""A bad setting stops start-up with one line naming the setting that would change it.

Every variable infra/settings.py validates is tried with a value it must refuse; the
refusals that point at a second setting (a loopback http:// URL, a host not allowed, a
secret named but unset, one of a pair) name that one too. `tachograph serve` and a
command that reads the log print the same line and exit 2.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from infra.settings import Settings, SettingsError

ROOT = Path(__file__).resolve().parents[1]
CODER_SECRET = "c" * 40

# (variable, bad value, other variables the case needs)
BAD_VALUES: list[tuple[str, str, dict[str, str]]] = [
    ("TACHOGRAPH_DATABASE_URL", "mysql://db/app", {}),
    ("TACHOGRAPH_DATABASE_SCHEMA", "bad-name;drop", {}),
    ("TACHOGRAPH_DATABASE_POOL_SIZE", "0", {}),
    ("TACHOGRAPH_HOOKS", '{"version": 2, "hooks": {}}', {}),
    ("TACHOGRAPH_HOOK_ALLOW_INSECURE_LOOPBACK", "maybe", {}),
    ("TACHOGRAPH_APPROVALS", '{"version": 1, "rules": [{}]}', {}),
    ("TACHOGRAPH_APPROVAL_NOTIFY", "ftp://notify.example/x", {}),
    ("TACHOGRAPH_APPROVAL_POLL_S", "0", {}),
    ("TACHOGRAPH_RECORD", "everything", {}),
    ("TACHOGRAPH_GEMINI_MODEL_EVENTS", "keep", {}),
    ("TACHOGRAPH_TASK_COMMAND", "claude -p {prompt}", {}),
    ("TACHOGRAPH_TASK_CONCURRENCY", "many", {}),
    ("TACHOGRAPH_TASK_TIMEOUT_S", "0", {}),
    ("TACHOGRAPH_TASK_KILL_GRACE_S", "-1", {}),
    ("TACHOGRAPH_TASK_POLL_S", "0", {}),
    ("TACHOGRAPH_TIMEZONE", "Mars/Olympus", {}),
    ("TACHOGRAPH_NO_SIGNAL_GRACE_S", "soon", {}),
    ("TACHOGRAPH_CODER_HOOK_SECRET", "short", {"TACHOGRAPH_CODER_HOOK_URL": "https://t/h"}),
    ("TACHOGRAPH_CODER_HOOK_URL", "coder", {"TACHOGRAPH_CODER_HOOK_SECRET": CODER_SECRET}),
    ("TACHOGRAPH_CODER_HOOK_TIMEOUT_MS", "10", {}),
    ("TACHOGRAPH_REFLECTOR", "magic", {}),
    ("TACHOGRAPH_REFLECTION_INTERVAL_S", "0", {}),
    ("TACHOGRAPH_SELF_UPDATE_IDLE_S", "never", {}),
    ("TACHOGRAPH_SELF_UPDATE_CRON", "every hour", {}),
    ("TACHOGRAPH_SELF_UPDATE_ENV", "OPENAI_API_KEY,MY VAR", {}),
    ("TACHOGRAPH_SELF_UPDATE_REVIEW", "robot", {}),
    ("TACHOGRAPH_SELF_UPDATE_REVIEW_TIMEOUT_S", "0", {}),
    ("TACHOGRAPH_SELF_UPDATE_REVIEW_MAX_BYTES", "100", {}),
    ("TACHOGRAPH_SELF_UPDATE_SANDBOX", "chroot", {}),
    ("TACHOGRAPH_SELF_UPDATE_FORWARD", "99999", {}),
    ("TACHOGRAPH_URL", "localhost:8000", {}),
    ("TACHOGRAPH_LOG_LEVEL", "loud", {}),
    ("TACHOGRAPH_ACCESS_LOG", "sometimes", {}),
    ("TACHOGRAPH_SERVE_CPU", "fast", {}),
    ("TACHOGRAPH_PROJECTIONS", "elsewhere", {}),
    ("TACHOGRAPH_OTLP_PORT", "70000", {}),
    ("TACHOGRAPH_HTTP_HEADER_TIMEOUT_S", "0", {}),
    ("TACHOGRAPH_HTTP_BODY_TIMEOUT_S", "forever", {}),
    ("TACHOGRAPH_LOG_NOTE_EVERY_EVENTS", "0", {}),
    ("TACHOGRAPH_LOG_NOTE_EVERY_S", "never", {}),
    ("TACHOGRAPH_WITNESSES", "https://witness.example=w.example+00000000+AAAA", {}),
]

# Variables whose every value is one: names, paths, keys and lists of names.
ANY_TEXT = {
    "TACHOGRAPH_DATA_DIR",
    "TACHOGRAPH_WORKSPACE_ROOT",
    "TACHOGRAPH_API_KEY",
    "TACHOGRAPH_LOG_SIGNING_KEY",
    "TACHOGRAPH_LOG_NOTE_KEY_FILE",
    "TACHOGRAPH_CODER_HOOK_ISSUER",
    "TACHOGRAPH_REDACTED_TOOLS",
    "TACHOGRAPH_HOOK_ALLOWED_HOSTS",
    # Refused only when the variable it names is unset (below).
    "TACHOGRAPH_APPROVAL_NOTIFY_SECRET_ENV",
}


def refusal(env: dict[str, str]) -> str:
    with pytest.raises(SettingsError) as refused:
        Settings.from_env(env)
    return str(refused.value)


def test_every_setting_the_server_reads_is_tried() -> None:
    source = (ROOT / "infra" / "settings.py").read_text(encoding="utf-8")
    read = set(re.findall(r'"(TACHOGRAPH_[A-Z0-9_]+)"', source))
    assert read == {name for name, _, _ in BAD_VALUES} | ANY_TEXT


@pytest.mark.parametrize(("name", "value", "extra"), BAD_VALUES, ids=[b[0] for b in BAD_VALUES])
def test_a_bad_value_is_refused_naming_the_setting(
    name: str, value: str, extra: dict[str, str]
) -> None:
    message = refusal({name: value, **extra})
    assert message.startswith(f"{name}: "), message
    assert "\n" not in message


def hooks(url: str) -> str:
    handler = {"id": "policy", "type": "http", "url": url}
    return json.dumps({"version": 1, "hooks": {"PreToolUse": [handler]}})


LOOPBACK_URLS = ["http://127.0.0.1:9000/deny", "http://localhost/deny", "http://[::1]:80/x"]


@pytest.mark.parametrize("url", LOOPBACK_URLS)
def test_a_loopback_http_handler_names_the_setting_that_allows_it(url: str) -> None:
    message = refusal({"TACHOGRAPH_HOOKS": hooks(url)})
    assert message.startswith("TACHOGRAPH_HOOKS: hooks.PreToolUse[0].url: must use https://")
    assert "TACHOGRAPH_HOOK_ALLOW_INSECURE_LOOPBACK=1" in message
    allowed = {"TACHOGRAPH_HOOKS": hooks(url), "TACHOGRAPH_HOOK_ALLOW_INSECURE_LOOPBACK": "1"}
    assert Settings.from_env(allowed).hooks.handlers_for("PreToolUse", "Bash")


def test_every_outbound_url_names_the_loopback_setting() -> None:
    reflector = json.dumps({"type": "http", "url": "http://127.0.0.1:9/reflect"})
    for name, value in (
        ("TACHOGRAPH_REFLECTOR", reflector),
        ("TACHOGRAPH_APPROVAL_NOTIFY", "http://127.0.0.1:9/notify"),
    ):
        message = refusal({name: value})
        assert message.startswith(f"{name}: "), message
        assert "TACHOGRAPH_HOOK_ALLOW_INSECURE_LOOPBACK=1" in message


def test_a_host_not_allowed_names_the_allow_list() -> None:
    message = refusal({"TACHOGRAPH_HOOKS": hooks("https://policy.internal/x")})
    assert message.startswith("TACHOGRAPH_HOOKS: hooks.PreToolUse[0].url: ")
    assert "TACHOGRAPH_HOOK_ALLOWED_HOSTS" in message


def test_a_secret_named_but_unset_names_the_variable_and_who_named_it() -> None:
    message = refusal(
        {
            "TACHOGRAPH_APPROVAL_NOTIFY": "https://n.example/x",
            "TACHOGRAPH_APPROVAL_NOTIFY_SECRET_ENV": "NOTIFY_KEY",
            "TACHOGRAPH_HOOK_ALLOWED_HOSTS": "n.example",
        }
    )
    assert message == "NOTIFY_KEY: named by TACHOGRAPH_APPROVAL_NOTIFY_SECRET_ENV but not set"


@pytest.mark.parametrize(
    ("present", "missing"),
    [
        ("TACHOGRAPH_CODER_HOOK_SECRET", "TACHOGRAPH_CODER_HOOK_URL"),
        ("TACHOGRAPH_CODER_HOOK_URL", "TACHOGRAPH_CODER_HOOK_SECRET"),
    ],
)
def test_half_a_coder_webhook_names_the_other_half(present: str, missing: str) -> None:
    value = CODER_SECRET if present.endswith("SECRET") else "https://t.example/hooks/coder"
    message = refusal({present: value})
    assert message == f"{missing}: must be set too, since {present} is set"


def run_cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cli.main", *args],
        env={"PATH": "/usr/bin:/bin", **env},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_serve_refuses_a_loopback_handler_in_one_line_naming_the_setting(tmp_path: Path) -> None:
    env = {
        "TACHOGRAPH_DATA_DIR": str(tmp_path / "data"),
        "TACHOGRAPH_HOOKS": hooks("http://127.0.0.1:9000/deny"),
    }
    result = run_cli(env, "serve")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "tachograph: configuration error: TACHOGRAPH_HOOKS: hooks.PreToolUse[0].url: "
        "must use https:// (set TACHOGRAPH_HOOK_ALLOW_INSECURE_LOOPBACK=1 for http:// on loopback)"
    ]
    assert not (tmp_path / "data").exists()


def test_a_command_that_reads_the_log_refuses_a_bad_setting_the_same_way(tmp_path: Path) -> None:
    env = {"TACHOGRAPH_DATA_DIR": str(tmp_path / "data"), "TACHOGRAPH_URL": "localhost:8000"}
    result = run_cli(env, "verify")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "tachograph: configuration error: TACHOGRAPH_URL: "
        "expected an http:// or https:// URL, got 'localhost:8000'"
    ]


def refused_start(env: dict[str, str], command: str) -> list[str]:
    result = run_cli(env, command, *(["--port", "0"] if command == "serve" else []))
    assert result.returncode == 2, result.stderr
    return [line for line in result.stderr.splitlines() if not line.startswith("{")]


@pytest.mark.parametrize("command", ["serve", "worker"])
def test_a_directory_setting_naming_a_file_is_refused_naming_the_setting(
    tmp_path: Path, command: str
) -> None:
    (tmp_path / "a-file").write_text("")
    for name, other in (
        ("TACHOGRAPH_DATA_DIR", "TACHOGRAPH_WORKSPACE_ROOT"),
        ("TACHOGRAPH_WORKSPACE_ROOT", "TACHOGRAPH_DATA_DIR"),
    ):
        env = {name: str(tmp_path / "a-file"), other: str(tmp_path / "elsewhere")}
        assert refused_start(env, command) == [
            f"tachograph: configuration error: {name}: cannot use {tmp_path / 'a-file'} "
            "as a directory (it is not a directory)"
        ]


def test_a_database_that_cannot_be_reached_names_the_setting(tmp_path: Path) -> None:
    env = {
        "TACHOGRAPH_DATABASE_URL": "postgresql://someone:pw@127.0.0.1:1/nowhere",
        "TACHOGRAPH_WORKSPACE_ROOT": str(tmp_path / "workspace"),
    }
    (line,) = refused_start(env, "serve")
    assert line.startswith(
        "tachograph: configuration error: TACHOGRAPH_DATABASE_URL: "
        "cannot reach the database nowhere at 127.0.0.1:1 ("
    )
    assert "pw" not in line.replace("nowhere", "")


COLLECTOR = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}


@pytest.mark.parametrize(
    ("name", "value", "extra"),
    [
        ("OTEL_EXPORTER_OTLP_ENDPOINT", "collector:4318", {}),
        ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "ftp://collector/v1/traces", {}),
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc", COLLECTOR),
        ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "grpc", COLLECTOR),
        ("OTEL_EXPORTER_OTLP_COMPRESSION", "zstd", COLLECTOR),
        ("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "0", COLLECTOR),
        ("OTEL_EXPORTER_OTLP_HEADERS", "authorization", COLLECTOR),
        ("OTEL_EXPORTER_OTLP_CERTIFICATE", "/nonexistent/ca.pem", COLLECTOR),
        ("OTEL_RESOURCE_ATTRIBUTES", "=x", COLLECTOR),
        ("OTEL_BSP_MAX_QUEUE_SIZE", "0", COLLECTOR),
        ("OTEL_BSP_SCHEDULE_DELAY", "soon", COLLECTOR),
        ("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "-1", COLLECTOR),
    ],
)
def test_a_bad_decision_export_setting_is_refused_naming_it(
    name: str, value: str, extra: dict[str, str]
) -> None:
    message = refusal({name: value, **extra})
    assert message.startswith(f"{name}: "), message
    assert "\n" not in message


def test_decision_export_is_off_without_an_endpoint_and_when_the_sdk_is_disabled() -> None:
    assert Settings.from_env({}).decision_export is None
    assert Settings.from_env({**COLLECTOR, "OTEL_SDK_DISABLED": "true"}).decision_export is None
    export = Settings.from_env(COLLECTOR).decision_export
    assert export is not None and export.endpoint == "http://127.0.0.1:4318/v1/traces"
    assert export.protocol == "http/protobuf" and export.compression == "none"


def test_a_refused_otlp_header_is_not_repeated() -> None:
    """Headers often carry the collector's credential: the refusal names the variable only."""
    message = refusal({**COLLECTOR, "OTEL_EXPORTER_OTLP_HEADERS": "ok=1,sk-live-secret"})
    assert message.startswith("OTEL_EXPORTER_OTLP_HEADERS: ")
    assert "sk-live-secret" not in message
