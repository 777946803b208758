"""One real `tachograph serve` (API key, fake agent executor, loopback hooks) and one browser.

Both are module-scoped: starting Chromium and the server once keeps the browser tests
fast on a shared two-core machine; every test creates its own data through the API.
The page does not depend on the store, so these run on SQLite; the API they call is
tested on both stores elsewhere.
"""

from __future__ import annotations

import json
import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from infra.settings import Settings
from tests.hook_server import HookServer, answer
from tests.support import Server
from tests.tasks.conftest import FAKE_AGENT, wait_until
from tests.web.browser import Browser

API_KEY = "web-page-test-key"


@dataclass
class Api:
    """The API as a second operator (or an agent) uses it, beside the page."""

    http: httpx.Client

    def get(self, path: str, **params: Any) -> Any:
        response = self.http.get(path, params=params)
        assert response.status_code == 200, response.text
        return response.json()

    def post(self, path: str, body: dict[str, Any] | None = None, status: int = 200) -> Any:
        response = self.http.post(path, json=body)
        assert response.status_code == status, response.text
        return response.json() if response.content else None

    def task(self, prompt: dict[str, Any] | str, **extra: Any) -> str:
        text = prompt if isinstance(prompt, str) else json.dumps(prompt)
        created = self.post("/api/tasks", {"workspaceId": "default", "prompt": text, **extra}, 201)
        return str(created["id"])

    def task_status(self, task_id: str) -> str:
        return str(self.get(f"/api/tasks/{task_id}")["status"])

    def wait_status(self, task_id: str, *wanted: str) -> dict[str, Any]:
        return wait_until(  # type: ignore[no-any-return]
            lambda: (t := self.get(f"/api/tasks/{task_id}"))["status"] in wanted and t,
            timeout=30,
            every=0.05,
        )


@dataclass
class Site:
    server: Server
    api: Api
    hooks: HookServer
    root: Path


STUCK_GOAL = "cannot be reflected on"


def reflect(body: dict[str, Any]) -> tuple[int, Any]:
    """An HTTP reflector: an overlay lesson per signal, a failed attempt for STUCK_GOAL ones."""
    goal = body["signal"]["goal"]
    if STUCK_GOAL in goal:
        return 503, {"error": "reflector busy"}
    lesson = f"When working on '{goal}', check {body['signal']['failure']}."
    return 200, {"schemaVersion": 1, "strategy": "overlay", "content": lesson}


def healthy(server: Server, http: httpx.Client) -> bool:
    """`Server.wait_ready` with the API key (health is under /api/, so it needs the key)."""
    if server.popen.poll() is not None:
        raise RuntimeError(f"serve exited early:\n{server.output()}")
    try:
        return http.get("/api/health", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    base = tmp_path_factory.mktemp("web")
    root = base / "workspace"
    root.mkdir()
    settings = Settings(data_dir=base / "data", workspace_root=root, api_key=API_KEY)
    hooks = HookServer()
    hooks.routes["/audit"] = lambda _: (500, {"error": "audit sink down"})
    hooks.routes["/policy"] = answer("deny", reason="Bash is not allowed in this workspace.")
    hooks.routes["/reflect"] = reflect
    hook_config = {
        "version": 1,
        "hooks": {
            "PreToolUse": [
                {
                    "id": "audit-log",
                    "type": "http",
                    "url": f"{hooks.url}/audit",
                    "failureMode": "open",
                    "timeoutMs": 2000,
                },
                {
                    "id": "tool-policy",
                    "type": "http",
                    "url": f"{hooks.url}/policy",
                    "matcher": ["Bash"],
                },
            ]
        },
    }
    env = {
        "TACHOGRAPH_LOG_SIGNING_KEY": "web-page-test-signing-key-0123456789abcdef",
        "TACHOGRAPH_HOOKS": json.dumps(hook_config),
        "TACHOGRAPH_HOOK_ALLOW_INSECURE_LOOPBACK": "1",
        "TACHOGRAPH_TASK_COMMAND": json.dumps([sys.executable, FAKE_AGENT, "{prompt}"]),
        "TACHOGRAPH_TASK_CONCURRENCY": "8",
        "TACHOGRAPH_TASK_POLL_S": "0.1",
        "TACHOGRAPH_TASK_KILL_GRACE_S": "1",
        "TACHOGRAPH_REFLECTOR": json.dumps({"type": "http", "url": f"{hooks.url}/reflect"}),
        "TACHOGRAPH_REFLECTION_INTERVAL_S": "0.2",
    }
    # A first run that stops cleanly leaves a signed checkpoint for the audit view.
    first = Server(settings, base / "first.log", env)
    try:
        with httpx.Client(base_url=first.url, headers={"x-tachograph-key": API_KEY}) as http:
            wait_until(lambda: healthy(first, http), timeout=30, every=0.1)
        first.signal(signal.SIGTERM)
        assert first.wait(30) == 0, first.output()
    finally:
        first.kill()
    with serving(Server(settings, base / "serve.log", env), hooks, root) as served:
        yield served


@contextmanager
def serving(server: Server, hooks: HookServer, root: Path) -> Iterator[Site]:
    """The site of a started `server` (admin key API_KEY), stopped (and `hooks` closed)
    on the way out."""
    try:
        with httpx.Client(
            base_url=server.url, headers={"x-tachograph-key": API_KEY}, timeout=15
        ) as http:
            wait_until(lambda: healthy(server, http), timeout=30, every=0.1)
            yield Site(server, Api(http), hooks, root)
    finally:
        if server.popen.poll() is None:
            server.signal(signal.SIGTERM)
        try:
            server.wait(30)
        finally:
            server.kill()
            hooks.close()


@pytest.fixture(scope="module")
def browser(site: Site) -> Iterator[Browser]:
    opened = Browser(site.server.url)
    try:
        yield opened
    finally:
        opened.close()


# Every module's browser fixture (each module may start its own server and browser).
BROWSER_FIXTURES = ("browser", "chromium", "review_browser")


@pytest.fixture(autouse=True)
def no_console_errors(request: pytest.FixtureRequest) -> Iterator[None]:
    """Fail a browser test on any error the page logs: a script error, or a request that
    failed (a 404 it should not have made) unless the test said it provokes it."""
    browsers: list[Browser] = [
        request.getfixturevalue(name) for name in BROWSER_FIXTURES if name in request.fixturenames
    ]
    for browser in browsers:
        browser.start_test()
    yield
    for browser in browsers:
        unexpected = browser.unexpected_console()
        assert unexpected == [], f"the page logged errors: {unexpected}"


@pytest.fixture
def page(browser: Browser, site: Site) -> Browser:
    """The page with the key already entered in this tab's session."""
    # sessionStorage is per origin and tab: set it from a plain asset, then load the page.
    browser.driver.get(f"{site.server.url}/web/style.css")
    browser.js("sessionStorage.setItem('tachograph-key', arguments[0])", API_KEY)
    browser.open()
    return browser
