"""Security checklist (issue 10), end to end, loopback only.

- every /api route (from the OpenAPI) refuses a missing or wrong API key;
- oversized bodies: tests/test_input_limits.py (every body route, declared and streamed);
- path traversal in workspace registration;
- hook URLs outside the allowed hosts, or carrying credentials, refuse start-up;
- a loopback handler answering with a redirect is never followed;
- JWT attacks on /hooks/coder are refused and store nothing.
"""

from __future__ import annotations

import base64
import hashlib
import json
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import jwt
import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from bootstrap import Services
from infra.settings import Settings
from tests.support import env_for, free_port

KEY = "sec-" + "k" * 28
CODER_SECRET = "c" * 40
CODER_URL = "https://tachograph.test/hooks/coder"


def head(client: TestClient) -> int:
    services: Services = client.app.state.services  # type: ignore[attr-defined]
    return services.app.recorder.max_notification_id() or 0


@pytest.fixture
def keyed(settings: Settings) -> Iterator[TestClient]:
    configured = settings.with_(
        api_key=KEY, coder_hook_secret=CODER_SECRET, coder_hook_url=CODER_URL
    )
    with TestClient(create_app(configured), raise_server_exceptions=False) as client:
        yield client


def test_every_api_route_refuses_a_missing_or_wrong_key(keyed: TestClient) -> None:
    paths = keyed.get("/openapi.json").json()["paths"]
    protected = [
        (method.upper(), path)
        for path, operations in paths.items()
        if path.startswith("/api/") or path == "/hooks/claude"
        for method in operations
    ]
    assert len(protected) >= 40
    before = head(keyed)
    filled = {"slug": "default", "kind": "overlay", "agent_id": "a", "key": "k"}
    for method, template in protected:
        path = template.format_map(_Ids(filled))
        for headers in ({}, {"x-tachograph-key": "wrong"}, {"x-tachograph-key": KEY[:-1]}):
            response = keyed.request(method, path, json={}, headers=headers)
            assert response.status_code == 401, (method, path, headers)
            assert response.json()["error"] == "unauthorized"
    assert head(keyed) == before
    allowed = keyed.get("/api/health", headers={"x-tachograph-key": KEY})
    assert allowed.status_code == 200
    # Operations outside /api authenticate differently or are public by design.
    assert keyed.get("/metrics").status_code == 200
    assert (
        keyed.get("/openapi.json").json()["components"]["securitySchemes"]["apiKey"]["name"]
        == "x-tachograph-key"
    )


class _Ids(dict[str, str]):
    def __missing__(self, name: str) -> str:
        return "6f1c2a4e-2f1b-4b9e-9a57-7f1e3c0d9b11"


@pytest.mark.parametrize(
    "path",
    ["../outside", "/etc", "a/../../b", "~root", "a\\..\\b", "escape", "escape/inner", "."],
)
def test_workspace_paths_cannot_leave_the_root(
    settings: Settings, tmp_path: Path, path: str
) -> None:
    outside = tmp_path / "outside"
    (outside / "inner").mkdir(parents=True)
    (settings.workspace_root / "escape").symlink_to(outside, target_is_directory=True)
    with TestClient(create_app(settings), raise_server_exceptions=False) as client:
        before = head(client)
        response = client.post("/api/workspaces", json={"id": "sneaky", "path": path})
        if path == ".":
            # The root itself is the default workspace's; registering it again is allowed.
            assert response.status_code == 201
            return
        assert response.status_code == 422, response.text
        assert response.json()["error"] == "path_outside_root"
        assert head(client) == before


@pytest.mark.parametrize(
    ("url", "allowed", "says"),
    [
        ("https://evil.example.com/policy", "policy.internal", "evil.example.com"),
        ("https://user:pass@policy.internal/policy", "policy.internal", "credentials"),
        ("http://policy.internal/policy", "policy.internal", "https"),
        ("http://127.0.0.1:9/policy", "", "https"),  # loopback http only when allowed
    ],
)
def test_hook_urls_outside_policy_refuse_start_up(
    settings: Settings, url: str, allowed: str, says: str
) -> None:
    hooks = {"version": 1, "hooks": {"PreToolUse": [{"id": "p", "type": "http", "url": url}]}}
    env = {
        **env_for(settings),
        "TACHOGRAPH_HOOKS": json.dumps(hooks),
        "TACHOGRAPH_HOOK_ALLOWED_HOSTS": allowed,
    }
    started = subprocess.run(
        [sys.executable, "-m", "cli.main", "serve", "--port", str(free_port())],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=Path(__file__).resolve().parents[1],
        check=False,
    )
    assert started.returncode == 2
    lines = started.stderr.strip().splitlines()
    assert len(lines) == 1 and "TACHOGRAPH_HOOKS" in lines[0], started.stderr
    assert "hooks.PreToolUse[0].url" in lines[0] and says.lower() in lines[0].lower(), lines[0]


class RedirectingHandler:
    """A loopback hook handler that answers 302 to a path that would allow everything."""

    def __init__(self) -> None:
        self.paths: list[str] = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's naming
                self.rfile.read(int(self.headers.get("content-length", "0")))
                owner.paths.append(self.path)
                if self.path == "/redirect":
                    self.send_response(302)
                    self.send_header("location", "/allow")
                    self.send_header("content-length", "0")
                    self.end_headers()
                    return
                body = json.dumps({"schemaVersion": 1, "outcome": "pass"}).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_a_redirecting_handler_is_never_followed_and_fails_closed(settings: Settings) -> None:
    handler = RedirectingHandler()
    hooks = {
        "version": 1,
        "hooks": {"PreToolUse": [{"id": "gate", "type": "http", "url": handler.url + "/redirect"}]},
    }
    parsed = Settings.from_env(
        {"TACHOGRAPH_HOOKS": json.dumps(hooks), "TACHOGRAPH_HOOK_ALLOW_INSECURE_LOOPBACK": "1"}
    )
    configured = settings.with_(hooks=parsed.hooks, hook_allow_insecure_loopback=True)
    try:
        with TestClient(create_app(configured), raise_server_exceptions=False) as client:
            session_id = client.post("/api/sessions", json={"workspaceId": "default"}).json()["id"]
            decision = client.post(
                f"/api/sessions/{session_id}/events",
                json={"event": "PreToolUse", "toolName": "Bash"},
            )
            assert decision.json()["outcome"] == "deny"
            assert "gate" in decision.json()["reason"]
            audit = client.get(
                f"/api/sessions/{session_id}/hooks",
                params={"minPosition": decision.headers["x-tachograph-position"]},
            ).json()["items"]
    finally:
        handler.close()
    assert handler.paths == ["/redirect"]
    (gate,) = [r for r in audit if r["handlerId"] == "gate"]
    assert gate["failure"] == "status"


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def coder_body(dispatch_id: str) -> bytes:
    body = {
        "type": "pre_tool_use",
        "meta": {
            "dispatch_id": dispatch_id,
            "schema_version": 1,
            "chat_id": "c-1",
            "owner_id": "o",
        },
        "data": {"tool_use_id": "t-1", "tool_name": "bash", "tool_input": {"cmd": "ls"}},
    }
    return json.dumps(body).encode()


def coder_claims(body: bytes, **overrides: Any) -> dict[str, Any]:
    parsed = json.loads(body)
    now = int(time.time())
    claims = {
        "aud": CODER_URL,
        "sub": f"coder:chat:{parsed['meta']['chat_id']}",
        "jti": parsed["meta"]["dispatch_id"],
        "type": parsed["type"],
        "iat": now,
        "nbf": now,
        "exp": now + 30,
        "body_sha256": hashlib.sha256(body).hexdigest(),
        "schema_version": 1,
    }
    claims.update(overrides)
    return claims


def test_jwt_attacks_on_the_coder_webhook_are_refused_and_store_nothing(
    keyed: TestClient,
) -> None:
    body = coder_body("d-attack")
    claims = coder_claims(body)
    unsigned = _b64(b'{"alg":"none","typ":"JWT"}') + "." + _b64(json.dumps(claims).encode()) + "."
    attacks: dict[str, tuple[str, bytes]] = {
        "no token": ("", body),
        "alg none": ("Bearer " + unsigned, body),
        "wrong secret": ("Bearer " + jwt.encode(claims, "x" * 40, algorithm="HS256"), body),
        "HS512": ("Bearer " + _hs512(claims), body),
        "expired": (
            "Bearer " + jwt.encode({**claims, "exp": int(time.time()) - 120}, CODER_SECRET),
            body,
        ),
        "other audience": (
            "Bearer "
            + jwt.encode({**claims, "aud": "https://elsewhere/hooks/coder"}, CODER_SECRET),
            body,
        ),
        "tampered body": (
            "Bearer " + jwt.encode(claims, CODER_SECRET),
            body.replace(b'"ls"', b'"rm -rf /"'),
        ),
        "replayed for another dispatch": (
            "Bearer " + jwt.encode(claims, CODER_SECRET),
            coder_body("d-other"),
        ),
        "type swapped": (
            "Bearer " + jwt.encode({**claims, "type": "stop"}, CODER_SECRET),
            body,
        ),
    }
    before = head(keyed)
    rejected_before = _rejected(keyed)
    for name, (authorization, payload) in attacks.items():
        headers = {"authorization": authorization} if authorization else {}
        response = keyed.post("/hooks/coder", content=payload, headers=headers)
        assert response.status_code == 401, name
        assert "coder-hook-signature" not in response.headers, name
    assert head(keyed) == before, "a refused webhook stored something"
    assert _rejected(keyed) - rejected_before == len(attacks)
    genuine = keyed.post(
        "/hooks/coder",
        content=body,
        headers={"authorization": "Bearer " + jwt.encode(claims, CODER_SECRET)},
    )
    assert genuine.status_code == 200 and "coder-hook-signature" in genuine.headers


def _hs512(claims: dict[str, Any]) -> str:
    with warnings.catch_warnings():  # PyJWT warns that the secret is short for SHA-512
        warnings.simplefilter("ignore")
        return jwt.encode(claims, CODER_SECRET, algorithm="HS512")


def _rejected(client: TestClient) -> float:
    text = client.get("/metrics").text
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("tachograph_webhook_rejected_total{")
    )
