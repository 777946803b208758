"""serve and worker keep their secrets in memory, not in the environment /proc shows.

A process that can read `/proc/<pid>/environ` of serve or worker (any process of the same
user where /proc is visible) must find no admin key, signing key, database URL or
PGPASSWORD there, and no hook or reflector secret, while serve still uses them.
"""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import httpx

from infra.settings import Settings
from tests.support import Proc, Server, env_for

ADMIN_KEY = "environ-test-admin-key-0123456789"
SECRETS = {
    "TACHOGRAPH_LOG_SIGNING_KEY": "environ-test-signing-key-0123456789",
    "PGPASSWORD": "environ-test-pgpassword",
    "REFLECTOR_TOKEN": "environ-test-reflector-token",
    "TACHOGRAPH_CODER_HOOK_SECRET": "environ-test-coder-secret-0123456789abcdef",
}
REFLECTOR = json.dumps(
    {"type": "http", "url": "http://127.0.0.1:9/reflect", "secretEnv": "REFLECTOR_TOKEN"}
)


def environ_of(pid: int) -> bytes:
    return Path(f"/proc/{pid}/environ").read_bytes()


def leaked(block: bytes, env: dict[str, str]) -> list[str]:
    """The secret variables whose name or value the environment block still holds."""
    names = ["TACHOGRAPH_API_KEY", "TACHOGRAPH_DATABASE_URL", *SECRETS]
    entries = block.split(b"\0")
    named = [n for n in names if any(e.startswith(n.encode() + b"=") for e in entries)]
    return named + [n for n in names if n in env and env[n].encode() in block]


def test_serve_and_worker_hold_no_secret_in_their_environment(
    settings: Settings, tmp_path: Path
) -> None:
    settings = settings.with_(api_key=ADMIN_KEY)
    env = {
        **env_for(settings),
        **SECRETS,
        "TACHOGRAPH_REFLECTOR": REFLECTOR,
        # The secret's partner (not a secret): one without the other refuses start-up.
        "TACHOGRAPH_CODER_HOOK_URL": "http://127.0.0.1/hooks/coder",
        "TACHOGRAPH_HOOK_ALLOW_INSECURE_LOOPBACK": "1",
    }
    server = Server(settings, tmp_path / "serve.log", env)
    worker = Proc(["worker"], env, tmp_path / "worker.log")
    try:
        server.wait_ready(headers={"x-tachograph-key": ADMIN_KEY})
        deadline = time.monotonic() + 30
        while "worker started" not in worker.output() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert "worker started" in worker.output(), worker.output()
        for proc in (server, worker):
            block = environ_of(proc.popen.pid)
            assert b"TACHOGRAPH_DATA_DIR=" in block  # what is no secret stays
            assert leaked(block, env) == [], proc.log
        # serve still holds the admin key it no longer shows.
        keys = httpx.get(f"{server.url}/api/keys", headers={"x-tachograph-key": ADMIN_KEY})
        assert keys.status_code == 200, keys.text
    finally:
        for proc in (server, worker):
            proc.signal(signal.SIGTERM)
            proc.wait(30)
