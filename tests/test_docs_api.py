"""docs/api.md names every route of the app and every field of its JSON bodies and answers.

Routes come from the app itself (the OpenAPI routes and those left out of the schema);
request fields from the body models; answer fields from real answers of a scenario that
touches every resource. A name missing from docs/api.md fails with the route it came from.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from api.app import create_app
from infra.settings import Settings

ROOT = Path(__file__).resolve().parents[1]
API_DOC = (ROOT / "docs" / "api.md").read_text(encoding="utf-8")
METHODS = "GET|POST|PUT|PATCH|DELETE"
DOCUMENTED_ROUTE = re.compile(rf"((?:{METHODS})(?:/(?:{METHODS}))*) (/[^\s`?|,)\[]*)")
# Keys below these hold the caller's own data or names of things, not fields of the API.
DATA_KEYS = {
    "data",  # an event's stored payload (/api/events, /api/streams, export)
    "state",  # an aggregate's state at a version
    "toolInput",
    "originalInput",
    "rewrittenInput",
    "replacement",
    "messages",
    "evidence",
    "projections",  # per read model name
    "byKind",
    "byStatus",
    "byStrategy",
}


def shape(path: str) -> str:
    """A route path with its parameters unnamed: /api/sessions/{}/events."""
    return re.sub(r"\{[^}]*\}", "{}", path.rstrip("/") or "/")


def app_routes(app: FastAPI) -> set[tuple[str, str]]:
    """(method, path shape) of every route the app answers, mounts as their path."""

    def walk(routes: list[Any]) -> Iterator[Any]:
        for route in routes:
            if hasattr(route, "effective_candidates"):  # an included router
                yield from walk(route.effective_candidates())
            else:
                yield route

    found = set()
    for route in walk(app.router.routes):
        methods = getattr(route, "methods", None) or {"GET"}
        for method in methods - {"HEAD"}:
            found.add((method, shape(route.path)))
    return found


def documented_routes() -> set[tuple[str, str]]:
    found = set()
    for methods, path in DOCUMENTED_ROUTE.findall(API_DOC):
        for method in methods.split("/"):
            found.add((method, shape(path)))
    return found


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> FastAPI:
    base = tmp_path_factory.mktemp("docs-api")
    (base / "workspace" / "project").mkdir(parents=True)
    return create_app(Settings(data_dir=base / "data", workspace_root=base / "workspace"))


def test_every_route_of_the_app_is_documented_and_every_documented_route_exists(
    app: FastAPI,
) -> None:
    routes = app_routes(app)
    assert ("POST", "/api/sessions/{}/events") in routes and ("GET", "/") in routes
    undocumented = sorted(routes - documented_routes())
    assert not undocumented, f"not in docs/api.md: {undocumented}"
    templates = [(m, re.compile(re.escape(p).replace(r"\{\}", "[^/]+") + "$")) for m, p in routes]
    gone = sorted(
        (method, path)
        for method, path in documented_routes() - routes
        if not any(m == method and pattern.match(path) for m, pattern in templates)
    )
    assert not gone, f"in docs/api.md but not served: {gone}"


def body_fields(app: FastAPI) -> dict[str, str]:
    """Each property of a request body schema in the OpenAPI document, with its schema."""
    document = app.openapi()
    schemas: dict[str, Any] = dict(document["components"]["schemas"])
    for ops in document["paths"].values():
        for op in ops.values():
            for content in op.get("requestBody", {}).get("content", {}).values():
                schemas[op["operationId"]] = content.get("schema", {})
    found: dict[str, str] = {}

    def visit(schema: Any, owner: str) -> None:
        if isinstance(schema, dict):
            for name, inner in schema.get("properties", {}).items():
                found.setdefault(name, owner)
                visit(inner, owner)
            for value in schema.values():
                if isinstance(value, dict | list):
                    visit(value, owner)
        elif isinstance(schema, list):
            for item in schema:
                visit(item, owner)

    for name, schema in schemas.items():
        if name not in ("Error", "HTTPValidationError", "ValidationError"):
            visit(schema, name)
    return found


def named(field: str) -> bool:
    return re.search(rf"(?<![\w-]){re.escape(field)}(?![\w-])", API_DOC) is not None


def test_every_field_of_every_request_body_is_documented(app: FastAPI) -> None:
    fields = body_fields(app)
    assert "toolInput" in fields and "workspaceId" in fields
    missing = {f: owner for f, owner in fields.items() if not named(f)}
    assert not missing, f"body fields not in docs/api.md: {missing}"


def answer_fields(value: Any, route: str, found: dict[str, str]) -> None:
    if isinstance(value, dict):
        for key, inner in value.items():
            found.setdefault(key, route)
            if key not in DATA_KEYS:
                answer_fields(inner, route, found)
    elif isinstance(value, list):
        for item in value:
            answer_fields(item, route, found)


def test_every_field_of_the_answers_is_documented(app: FastAPI) -> None:
    found: dict[str, str] = {}
    with TestClient(app, raise_server_exceptions=False) as client:

        def call(method: str, url: str, **kwargs: Any) -> Any:
            response = client.request(method, url, **kwargs)
            assert response.status_code < 400, (method, url, response.text)
            if response.headers.get("content-type", "").startswith("application/x-ndjson"):
                for line in response.text.splitlines():
                    answer_fields(json.loads(line), f"{method} {url}", found)
                return None
            body = response.json() if response.content else None
            answer_fields(body, f"{method} {url}", found)
            return body

        call("POST", "/api/workspaces", json={"id": "project", "path": "project"})
        call("GET", "/api/workspaces")
        call("PATCH", "/api/workspaces/project", json={"selfUpdate": False})
        session = call("POST", "/api/sessions", json={"workspaceId": "project", "title": "t"})
        sid = session["id"]
        events = f"/api/sessions/{sid}/events"
        call("POST", events, json={"event": "UserPromptSubmit", "turnId": "t1", "prompt": "go"})
        call(
            "POST",
            events,
            json={
                "event": "PreToolUse",
                "turnId": "t1",
                "toolName": "Bash",
                "toolCallId": "c1",
                "toolInput": {"command": "ls"},
            },
        )
        last = client.post(
            events,
            json={
                "event": "PostToolUse",
                "turnId": "t1",
                "toolName": "Bash",
                "toolCallId": "c1",
                "toolResponse": {"stdout": "x"},
                "durationMs": 3,
            },
        )
        call("POST", events, json={"event": "Stop", "turnId": "t1", "lastAssistantMessage": "ok"})
        wait = {"minPosition": last.headers["x-tachograph-position"]}
        call("GET", "/api/sessions", params=wait)
        call("GET", f"/api/sessions/{sid}", params=wait)
        call("PUT", f"/api/sessions/{sid}", json={"revision": session["revision"], "messages": []})
        call("PATCH", f"/api/sessions/{sid}", json={"title": "renamed"})
        call("GET", f"/api/sessions/{sid}/hooks", params=wait)
        call("GET", f"/api/sessions/{sid}/hooks", params={**wait, "groupBy": "turn"})
        call("GET", f"/api/sessions/{sid}/timeline", params=wait)
        call("GET", "/api/activity", params=wait)
        call("GET", f"/api/sessions/{sid}/export")
        task = call("POST", "/api/tasks", json={"workspaceId": "project", "prompt": "do it"})
        call("GET", "/api/tasks")
        call("GET", f"/api/tasks/{task['id']}")
        schedule = call(
            "POST",
            "/api/schedules",
            json={"workspaceId": "project", "name": "n", "cron": "0 3 * * *", "prompt": "p"},
        )
        call("GET", f"/api/schedules/{schedule['id']}")
        call("PATCH", f"/api/schedules/{schedule['id']}", json={"paused": True})
        call("GET", "/api/settings/autonomy")
        call("PATCH", "/api/settings/autonomy", json={"evolution": False})
        signal = call(
            "POST",
            "/api/autonomy/signals",
            json={"agentId": "a", "traceId": "t", "kind": "outcome", "goal": "g", "sessionId": sid},
        )
        call("GET", f"/api/autonomy/signals/{signal['id']}")
        call("GET", "/api/autonomy/pipeline")
        call("GET", "/api/autonomy/revisions")
        call("PUT", "/api/autonomy/targets/skill/a/k", json={"content": "c"})
        call("GET", "/api/autonomy/targets/skill/a/k")
        call("GET", "/api/autonomy/targets")
        call("POST", "/api/autonomy/reconcile")
        call("POST", "/api/keys", json={"role": "reader", "label": "r"})
        call("GET", "/api/keys")
        call("GET", "/api/whoami")
        call("GET", "/api/events", params={"limit": 5})
        call("GET", f"/api/streams/{sid}")
        call("GET", f"/api/streams/{sid}/state", params={"version": 1})
        call("GET", "/api/log/checkpoints")
        call("GET", "/api/log/verify")
        call("GET", "/api/health")
        call("GET", "/api/approvals")
        call("POST", f"/api/tasks/{task['id']}/cancel")
    assert {"outcome", "dispatchId", "calls", "position"} <= set(found)
    missing = {f: route for f, route in found.items() if not named(f)}
    assert not missing, f"answer fields not in docs/api.md: {missing}"
