"""Settings: parsed once from the environment; a bad value names its variable."""

from __future__ import annotations

import subprocess
import sys

import pytest

from infra.settings import Settings, SettingsError


def test_defaults() -> None:
    settings = Settings.from_env({})
    assert settings.database_url is None
    assert str(settings.data_dir) == "data"
    assert settings.redacted_tools == {"storeSecret", "recallSecret", "updateSecret"}
    assert settings.task_concurrency == 2 and settings.timezone == "UTC"
    assert (settings.http_header_timeout_s, settings.http_body_timeout_s) == (10, 30)


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("TACHOGRAPH_DATABASE_URL", "mysql://x/y"),
        ("TACHOGRAPH_DATABASE_URL", "postgresql://host-only"),
        ("TACHOGRAPH_TASK_CONCURRENCY", "many"),
        ("TACHOGRAPH_TASK_CONCURRENCY", "0"),
        ("TACHOGRAPH_TASK_TIMEOUT_S", "-5"),
        ("TACHOGRAPH_TIMEZONE", "Mars/Olympus"),
        ("TACHOGRAPH_HOOK_ALLOW_INSECURE_LOOPBACK", "maybe"),
        ("TACHOGRAPH_TASK_COMMAND", "claude -p"),
        ("TACHOGRAPH_TASK_COMMAND", "[]"),
        ("TACHOGRAPH_CODER_HOOK_SECRET", "short"),
        ("TACHOGRAPH_NO_SIGNAL_GRACE_S", "soon"),
        ("TACHOGRAPH_DATABASE_SCHEMA", "bad-name;drop"),
        ("TACHOGRAPH_SELF_UPDATE_REVIEW_MAX_BYTES", "64k"),
        ("TACHOGRAPH_SELF_UPDATE_REVIEW_MAX_BYTES", "100"),
        ("TACHOGRAPH_HTTP_HEADER_TIMEOUT_S", "0"),
        ("TACHOGRAPH_HTTP_BODY_TIMEOUT_S", "forever"),
        ("TACHOGRAPH_SELF_UPDATE_SANDBOX", "chroot"),
    ],
)
def test_malformed_value_names_the_variable(name: str, value: str) -> None:
    with pytest.raises(SettingsError) as excinfo:
        Settings.from_env({name: value})
    assert str(excinfo.value).startswith(f"{name}:")


def test_database_url_is_parsed() -> None:
    url = Settings.from_env(
        {"TACHOGRAPH_DATABASE_URL": "postgresql://u:p%40ss@db.internal:6543/prod"}
    ).database_url
    assert url is not None
    assert (url.host, url.port, url.dbname, url.user, url.password) == (
        "db.internal",
        6543,
        "prod",
        "u",
        "p@ss",
    )


def test_pgpassword_is_the_database_password_when_the_url_has_none() -> None:
    """libpq's fallback made explicit, so serve can drop PGPASSWORD from its environment."""
    base = "postgresql://u@db.internal/prod"
    env = {"TACHOGRAPH_DATABASE_URL": base, "PGPASSWORD": "from-env"}
    url = Settings.from_env(env).database_url
    assert url is not None and url.password == "from-env"
    env["TACHOGRAPH_DATABASE_URL"] = "postgresql://u:in-url@db.internal/prod"
    url = Settings.from_env(env).database_url
    assert url is not None and url.password == "in-url"


@pytest.mark.parametrize(
    ("value", "mode"),
    [(None, "auto"), ("strict", "strict"), ("netns", "strict"), ("NONE", "none")],
)
def test_the_sandbox_setting_and_its_earlier_name(value: str | None, mode: str) -> None:
    env = {} if value is None else {"TACHOGRAPH_SELF_UPDATE_SANDBOX": value}
    assert Settings.from_env(env).self_update_sandbox == mode


def refused_start(env: dict[str, str]) -> list[str]:
    """What `serve` says when it refuses to start with these variables (exit 2)."""
    result = subprocess.run(
        [sys.executable, "-m", "cli.main", "serve"],
        env={**env, "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    return result.stderr.strip().splitlines()


def test_cli_refuses_to_start_with_one_line_naming_the_variable(tmp_path: object) -> None:
    lines = refused_start({"TACHOGRAPH_TASK_CONCURRENCY": "lots"})
    assert len(lines) == 1
    assert "TACHOGRAPH_TASK_CONCURRENCY" in lines[0]


def test_a_review_limit_above_the_inspect_limit_refuses_start_in_one_line() -> None:
    # A reviewer may be shown less than inspection lets through only by failing the
    # cycle; a limit above what inspection allows is a configuration mistake.
    assert Settings.from_env({}).self_update_review_max_bytes == 64 * 1024
    whole = {"TACHOGRAPH_SELF_UPDATE_REVIEW_MAX_BYTES": "262144"}
    assert Settings.from_env(whole).self_update_review_max_bytes == 256 * 1024
    lines = refused_start({"TACHOGRAPH_SELF_UPDATE_REVIEW_MAX_BYTES": "262145"})
    assert lines == [
        "tachograph: configuration error: "
        "TACHOGRAPH_SELF_UPDATE_REVIEW_MAX_BYTES: must not exceed the patch inspection's "
        "limit of 262144 bytes, got 262145"
    ], lines


def test_bad_hook_configuration_refuses_start_naming_the_json_path() -> None:
    hooks = '{"version": 1, "hooks": {"PreToolUse": [{"id": "p", "type": "http", "url": "http://evil.example/x"}]}}'
    result = subprocess.run(
        [sys.executable, "-m", "cli.main", "serve"],
        env={"TACHOGRAPH_HOOKS": hooks, "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    line = result.stderr.strip()
    assert "\n" not in line
    assert "TACHOGRAPH_HOOKS: hooks.PreToolUse[0].url" in line


def test_missing_hook_secret_names_the_variable() -> None:
    hooks = (
        '{"version": 1, "hooks": {"PreToolUse": [{"id": "p", "type": "http", '
        '"url": "https://policy.internal/x", "secretEnv": "POLICY_SECRET"}]}}'
    )
    with pytest.raises(SettingsError, match="^POLICY_SECRET:"):
        Settings.from_env(
            {"TACHOGRAPH_HOOKS": hooks, "TACHOGRAPH_HOOK_ALLOWED_HOSTS": "policy.internal"}
        )
