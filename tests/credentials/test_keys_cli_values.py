"""`tachograph keys`: what a person types is named back to them, short session ids work."""

from __future__ import annotations

import json
import subprocess

from fastapi.testclient import TestClient

from infra.settings import Settings
from tests.support import run_cli


def keys(settings: Settings, *args: str) -> subprocess.CompletedProcess[str]:
    return run_cli(settings, "keys", *args)


def test_errors_name_what_was_typed(client: TestClient, settings: Settings) -> None:
    revoked = keys(settings, "revoke", "nobody")
    assert revoked.returncode == 1
    assert revoked.stderr.splitlines()[-1] == "tachograph: no key labelled or with id 'nobody'"
    bad = keys(settings, "issue", "--role", "agent", "--session", "not-a-uuid")
    assert bad.returncode == 1
    assert "--session 'not-a-uuid' is not a session id" in bad.stderr
    assert "hexadecimal" not in bad.stderr


def test_an_agent_token_binds_to_the_short_id_the_page_shows(
    client: TestClient, settings: Settings
) -> None:
    session = client.post("/api/sessions", json={"workspaceId": "default"}).json()["id"]
    issued = keys(
        settings, "issue", "--role", "agent", "--label", "short", "--session", session[:8]
    )
    assert issued.returncode == 0, issued.stderr
    listed = json.loads(keys(settings, "list", "--json").stdout)
    assert next(r for r in listed if r["label"] == "short")["sessionId"] == session
