"""The CLI as a person meets it: short session ids everywhere a session is named, errors
that name what was typed, warnings only where they apply, help without internals."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys

import pytest
from fastapi.testclient import TestClient

from domain.lifecycle import agent_session_uuid
from infra.settings import Settings
from tests.support import env_for, run_cli

SIGNING_WARNING = "TACHOGRAPH_LOG_SIGNING_KEY is unset"
# What a person types is parsed before any store is asked: one store shows it.
SQLITE_ONLY = pytest.mark.parametrize("store_kind", ["sqlite"], indirect=True)


def two_sessions_sharing_a_prefix(client: TestClient) -> tuple[str, str, str]:
    """Two Claude Code sessions whose ids start alike, and that shared start (4 hex)."""
    seen: dict[str, str] = {}
    for n in itertools.count():
        latest = f"edge-{n}"
        prefix = str(agent_session_uuid(f"claude-code:{latest}"))[:4]
        if prefix in seen:
            break
        seen[prefix] = latest
    ids = []
    for native in (seen[prefix], latest):
        started = client.post(
            "/hooks/claude",
            json={"hook_event_name": "SessionStart", "session_id": native, "source": "startup"},
        )
        assert started.status_code == 200, started.text
        ids.append(str(agent_session_uuid(f"claude-code:{native}")))
    return ids[0], ids[1], prefix


def test_a_short_id_that_fits_two_sessions_is_refused_naming_both(
    client: TestClient, settings: Settings
) -> None:
    first, second, prefix = two_sessions_sharing_a_prefix(client)
    for args in (
        ["activity", "--session", prefix],
        ["export", "--session", prefix],
        ["keys", "issue", "--role", "agent", "--session", prefix],
    ):
        refused = run_cli(settings, *args)
        assert refused.returncode != 0, args
        assert f"--session {prefix!r} is ambiguous" in refused.stderr, refused.stderr
        assert first in refused.stderr and second in refused.stderr
    # One character more tells them apart, if the ids differ there.
    longer = next(i for i in range(4, 36) if first[i] != second[i]) + 1
    exported = run_cli(settings, "export", "--session", first[:longer])
    assert exported.returncode == 0, exported.stderr
    assert {json.loads(line)["aggregateId"] for line in exported.stdout.splitlines()} >= {first}


@SQLITE_ONLY
def test_export_takes_the_short_id_the_page_shows(client: TestClient, settings: Settings) -> None:
    session = client.post("/api/sessions", json={"workspaceId": "default"}).json()["id"]
    short = run_cli(settings, "export", "--session", session[:8])
    full = run_cli(settings, "export", "--session", session)
    assert short.returncode == 0, short.stderr
    assert short.stdout == full.stdout and session in short.stdout
    unknown = run_cli(settings, "export", "--session", "ffffffff")
    assert unknown.returncode == 2
    assert unknown.stderr.strip() == (
        "tachograph export: --session 'ffffffff': no session id starts with it"
    )


@SQLITE_ONLY
def test_keys_revoke_names_what_was_typed_and_takes_the_key_id(
    client: TestClient, settings: Settings
) -> None:
    nobody = run_cli(settings, "keys", "revoke", "nobody")
    assert nobody.returncode == 1
    assert nobody.stderr.strip() == "tachograph: no key labelled or with id 'nobody'"
    issued = run_cli(settings, "keys", "issue", "--role", "reader", "--label", "auditor")
    assert issued.returncode == 0, issued.stderr
    # The id as the log names the key: the aggregate of its issue event.
    exported = run_cli(settings, "export").stdout.splitlines()
    [key_id] = [
        e["aggregateId"]
        for e in map(json.loads, exported)
        if e["type"].endswith("ApiKey.Issued") and e["data"]["label"] == "auditor"
    ]
    revoked = run_cli(settings, "keys", "revoke", key_id.upper())
    assert (revoked.returncode, revoked.stdout) == (0, "revoked 'auditor'\n"), revoked.stderr
    listed = json.loads(run_cli(settings, "keys", "list", "--json").stdout)
    assert next(k for k in listed if k["label"] == "auditor")["revokedAt"] is not None


@SQLITE_ONLY
def test_the_signing_key_warning_is_left_to_the_processes_that_sign(
    client: TestClient, settings: Settings
) -> None:
    assert settings.log_signing_key is None
    session = client.post("/api/sessions", json={"workspaceId": "default"}).json()["id"]
    for args in (
        ["activity"],
        ["keys", "list"],
        ["keys", "issue", "--role", "agent", "--session", session[:8]],
        ["export", "--session", session],
        ["checkpoints"],
    ):
        ran = run_cli(settings, *args)
        assert ran.returncode == 0, (args, ran.stderr)
        assert SIGNING_WARNING not in ran.stderr, args


@SQLITE_ONLY
def test_help_says_what_a_command_does_not_how_it_is_built(settings: Settings) -> None:
    def help_of(*args: str) -> str:
        shown = subprocess.run(
            [sys.executable, "-m", "cli.main", *args, "--help"],
            env=env_for(settings),
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert shown.returncode == 0, shown.stderr
        return shown.stdout

    commands = [
        ["serve"], ["worker"], ["export"], ["activity"], ["verify"], ["checkpoints"],
        ["replay"], ["hook"], ["hook", "install"], ["hook", "uninstall"], ["keys"],
        ["keys", "issue"], ["keys", "list"], ["keys", "revoke"], ["bench"], ["doctor"],
    ]  # fmt: skip
    for text in [help_of(), *(help_of(*c) for c in commands)]:
        for internal in ("SPEC", "§", "import", "lazy", "hot path"):
            assert internal not in text, (internal, text)
    assert "PATH" in help_of("doctor") and "yesterday" in help_of("activity")
