"""Issue, use, revoke and reuse a key across two `serve` processes on one PostgreSQL.

Also what the stores and logs hold afterwards: digests, never a secret.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import psycopg
import pytest

from infra.settings import Settings
from tests.support import PG_URL, Server, env_for

pytestmark = [pytest.mark.slow, pytest.mark.parametrize("store_kind", ["postgres"], indirect=True)]

ADMIN_KEY = "replica-test-admin-key"
ADMIN = {"x-tachograph-key": ADMIN_KEY}
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def replicas(settings: Settings, tmp_path: Path) -> Iterator[list[Server]]:
    secured = settings.with_(api_key=ADMIN_KEY)
    extra = {"TACHOGRAPH_DATABASE_POOL_SIZE": "2", "TACHOGRAPH_ACCESS_LOG": "1"}
    servers = [Server(secured, tmp_path / f"serve-{n}.log", extra) for n in "ab"]
    try:
        for server in servers:
            server.wait_ready(timeout=60, headers=ADMIN)
        yield servers
    finally:
        for server in servers:
            if server.popen.poll() is None:
                server.signal(signal.SIGTERM)
                server.wait(30)


def status(server: Server, secret: str, path: str = "/api/sessions") -> httpx.Response:
    return httpx.get(server.url + path, headers={"x-tachograph-key": secret}, timeout=5)


def refused_within(server: Server, secret: str, seconds: float) -> float:
    start = time.monotonic()
    while time.monotonic() - start < seconds:
        answer = status(server, secret)
        if answer.status_code == 401:
            assert answer.json()["reason"] == "revoked"
            return time.monotonic() - start
        time.sleep(0.02)
    raise AssertionError(f"still accepted after {seconds} s")


def cli(settings: Settings, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**env_for(settings.with_(api_key=ADMIN_KEY)), "HOME": str(settings.data_dir)}
    return subprocess.run(
        [sys.executable, "-m", "cli.main", "keys", *args],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_issue_use_revoke_reuse_across_replicas(
    replicas: list[Server], settings: Settings, tmp_path: Path
) -> None:
    a, b = replicas
    issued = httpx.post(
        a.url + "/api/keys", json={"label": "carol", "role": "reader"}, headers=ADMIN, timeout=10
    )
    assert issued.status_code == 201
    secret = issued.json()["secret"]
    # Issued on A, usable on B at once (B reads the new key on first sight).
    assert status(b, secret).status_code == 200
    assert status(a, secret).status_code == 200
    me = status(b, secret, "/api/whoami").json()
    assert (me["label"], me["role"]) == ("carol", "reader")

    revoked = httpx.post(a.url + "/api/keys/carol/revoke", headers=ADMIN, timeout=10)
    assert revoked.status_code == 200
    assert status(a, secret).status_code == 401
    assert refused_within(b, secret, 1.0) < 1.0
    # Reuse: the secret stays refused, the label cannot be issued again.
    assert status(b, secret).status_code == 401
    again = httpx.post(
        b.url + "/api/keys", json={"label": "carol", "role": "reader"}, headers=ADMIN, timeout=10
    )
    assert again.status_code == 409

    # The CLI issues straight into the store; both replicas take the key at once.
    made = cli(settings, "issue", "--role", "operator", "--label", "dave", "--expires", "1d")
    assert made.returncode == 0, made.stderr
    cli_secret = made.stdout.strip()
    assert "secret is shown this once" in made.stderr
    for server in (a, b):
        assert status(server, cli_secret, "/api/whoami").json()["actor"] == "key:dave"
    listed = cli(settings, "list")
    assert listed.returncode == 0 and "dave" in listed.stdout and "carol" in listed.stdout
    assert cli_secret not in listed.stdout
    assert cli(settings, "revoke", "dave", "--reason", "rotated").returncode == 0
    for server in (a, b):
        assert refused_within(server, cli_secret, 1.0) < 1.0
    rows = json.loads(cli(settings, "list", "--json").stdout)
    dave = next(r for r in rows if r["label"] == "dave")
    assert dave["revokedBy"].startswith("cli:") and dave["reason"] == "rotated"

    # Secrets are in no store and no log: only their digests are.
    for server in (a, b):
        server.signal(signal.SIGTERM)
        assert server.wait(30) == 0
    secrets = [secret, cli_secret, ADMIN_KEY]
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        tables = conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = %s",
            (settings.database_schema,),
        ).fetchall()
        assert len(tables) > 10
        for (table,) in tables:
            rows_text = conn.execute(
                f'SELECT t::text FROM "{settings.database_schema}"."{table}" t'
            ).fetchall()
            dumped = "\n".join(r[0] for r in rows_text)
            for value in secrets:
                assert value not in dumped, table
        usage = conn.execute(
            f'SELECT label FROM "{settings.database_schema}".api_key_usage'
        ).fetchall()
        assert {"carol", "dave"} <= {r[0] for r in usage}  # last use, from both replicas
    for log in tmp_path.glob("*.log"):
        text = log.read_text(errors="replace")
        assert "/api/whoami" in text  # the access log was on: every request has a line
        for value in secrets:
            assert value not in text, log
    for path in settings.data_dir.rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            for value in secrets:
                assert value.encode() not in data, path
