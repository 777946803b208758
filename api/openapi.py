"""The OpenAPI document says what the API really answers, errors included.

FastAPI documents only the success status and a 422 shaped `{"detail": [...]}`. Every
error here is `{"error", "message", ...}` (api/errors.py), and a route can also answer
400 (invalid JSON), 401 (API key), 404, 409, 413 (body over 1 MiB) and 503 (database
unavailable, projection lagging). Clients (and the schemathesis run in CI) read this
document, so it is completed here once for every route, present and future.
"""

from __future__ import annotations

import inspect
import re
from typing import Any

from fastapi import FastAPI

from api.auth import required_capability
from api.hook_routes import HOOK_ROUTES
from api.middleware import OTLP_PATH
from api.otlp_routes import OTLP_ROUTES
from domain.credentials import NEEDED_ROLE

ERROR_SCHEMA: dict[str, Any] = {
    "title": "Error",
    "type": "object",
    "required": ["error", "message"],
    "properties": {
        "error": {"type": "string", "description": "snake_case code, stable for clients"},
        "message": {"type": "string", "description": "one sentence a person can act on"},
        "details": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {"field": {"type": "string"}, "problem": {"type": "string"}},
            },
        },
    },
    "additionalProperties": True,
}
_ERROR_REF = {"$ref": "#/components/schemas/Error"}
HEALTH_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["status", "database", "projections", "scheduler", "executor"],
    "properties": {
        "status": {"type": "string", "enum": ["ok", "unavailable"]},
        "database": {"type": "string", "enum": ["ok", "unreachable"]},
        "projections": {
            "type": "object",
            "additionalProperties": {
                "type": "object",
                "properties": {
                    "position": {"type": "integer"},
                    "lag": {"type": ["integer", "null"]},
                },
            },
        },
        "scheduler": {"type": "string"},
        "executor": {"type": "string"},
    },
}

_DESCRIPTIONS = {
    "400": "Invalid JSON (`invalid_json`).",
    "401": "Missing, malformed, unknown, expired or revoked `x-tachograph-key` "
    "(`unauthorized`, with `reason`; a missing key only when an API key is configured).",
    "403": "The credential's role does not reach this route, or an agent token is bound "
    "elsewhere (`forbidden`, with `requiredRole` and `role`).",
    "404": "No such resource (`not_found`).",
    "409": "Conflict with the current state (`invalid_state`, `revision_conflict`, ...).",
    "413": "Request body over 1 MiB (`payload_too_large`).",
    "422": "Unknown or invalid fields (`unknown_field`, `validation_error`).",
    "503": "Database unreachable (`database_unavailable`) or read models lagging "
    "(`projection_lagging`); retry.",
}
_MUTATING = frozenset({"post", "put", "patch", "delete"})
# Creates that answer 200 with the original when it already existed.
_IDEMPOTENT_CREATES = frozenset({("/api/workspaces", "post"), ("/api/autonomy/signals", "post")})
# Adapter routes read their raw body themselves (to verify signatures and map payloads).
_RAW_JSON_BODIES: dict[str, dict[str, Any]] = {
    "/hooks/claude": {
        "type": "object",
        "description": "Claude Code's hook JSON (SPEC §6.5); unknown fields are kept.",
        "required": ["hook_event_name", "session_id"],
        "properties": {
            "hook_event_name": {"type": "string", "minLength": 1, "maxLength": 64},
            "session_id": {"type": "string", "minLength": 1, "maxLength": 256},
        },
    },
    "/hooks/{runtime}": {
        "type": "object",
        "description": "The runtime's own hook JSON (SPEC §6.5, docs/hooks.md), naming its event "
        "in `hook_event_name`; unknown fields are kept.",
    },
    "/hooks/{runtime}/{event}": {
        "type": "object",
        "description": "The runtime's own hook JSON for the event the path names (Copilot "
        "CLI's own payloads do not name it); unknown fields are kept.",
    },
    "/hooks/coder": {
        "type": "object",
        "description": "Coder's chat lifecycle webhook body, HS256-signed (SPEC §6.6).",
        "required": ["type", "meta"],
        "properties": {"type": {"type": "string"}, "meta": {"type": "object"}, "data": {}},
    },
}


def install_openapi(app: FastAPI, *, api_key: bool) -> None:
    """Wrap `app.openapi` so the generated document carries the error contract.

    With `api_key`, protected operations also declare the `x-tachograph-key` scheme.
    """
    generate = app.openapi

    def openapi() -> dict[str, Any]:
        schema = generate()
        if not schema.get("x-tachograph-errors"):
            schema.setdefault("paths", {}).update(hook_route_operations())
            complete(schema, api_key=api_key)
            schema["x-tachograph-errors"] = True
        return schema

    app.openapi = openapi  # type: ignore[method-assign]


def complete(schema: dict[str, Any], *, api_key: bool = False) -> None:
    """Add the error responses every operation can give, and the key scheme (in place)."""
    components = schema.setdefault("components", {})
    models = components.setdefault("schemas", {})
    models["Error"] = ERROR_SCHEMA
    models.pop("HTTPValidationError", None)
    models.pop("ValidationError", None)
    if api_key:
        components.setdefault("securitySchemes", {})["apiKey"] = {
            "type": "apiKey",
            "in": "header",
            "name": "x-tachograph-key",
            "description": "TACHOGRAPH_API_KEY (the bootstrap admin key) or a key from "
            "`tachograph keys issue`; compared in constant time.",
        }
    for path, operations in schema.get("paths", {}).items():
        for method, operation in operations.items():
            _complete_operation(path, method, operation)
            role = required_role(method, path)
            if role is not None:
                operation["x-tachograph-role"] = role
                if api_key:
                    operation["security"] = [{"apiKey": []}]


def required_role(method: str, path: str) -> str | None:
    """The smallest role an operation needs (api/auth.py decides), None when public."""
    capability = required_capability(method.upper(), path)
    return None if capability is None else NEEDED_ROLE[capability]


def _protected(path: str) -> bool:
    return required_capability("GET", path) is not None


def _complete_operation(path: str, method: str, op: dict[str, Any]) -> None:
    if path in _RAW_JSON_BODIES and "requestBody" not in op:
        op["requestBody"] = {
            "required": True,
            "content": {"application/json": {"schema": _RAW_JSON_BODIES[path]}},
        }
    for parameter in op.get("parameters", []):
        _not_nullable(parameter)
    if OTLP_PATH.match(path):
        _otlp_operation(op)
        return
    responses: dict[str, Any] = op.setdefault("responses", {})
    if path == "/metrics":
        responses["200"] = {
            "description": "Prometheus text exposition format.",
            "content": {"text/plain": {"schema": {"type": "string"}}},
        }
        return
    if path == "/api/health":
        health = {
            "description": "Health; 503 (same body) when the database is unreachable.",
            "content": {"application/json": {"schema": HEALTH_SCHEMA}},
        }
        responses["200"] = health
        responses["503"] = health
        responses["401"] = _error("401")
        responses["403"] = _error("403")
        return
    if (path, method) in _IDEMPOTENT_CREATES:
        responses.setdefault(
            "200", {"description": "Already existed: the original.", "content": _json_any()}
        )
    if path == "/api/events":
        success = responses.get("200", {})
        success.setdefault("content", {})["application/x-ndjson"] = {"schema": {"type": "string"}}
    codes = ["422", "503"]
    if "requestBody" in op:
        codes += ["400", "413"]
    if _protected(path):
        codes += ["401", "403"]
    if path.startswith("/api/") or path == "/hooks/coder":
        codes.append("404")  # the resource, or one the body names (a workspace, a task)
    if method in _MUTATING:
        codes.append("409")
    if path == "/hooks/coder":
        codes.append("401")
    for code in sorted(set(codes)):
        responses[code] = _error(code)


_OTLP_CONTENT: dict[str, Any] = {
    "application/json": {"schema": {"type": "object"}},
    "application/x-protobuf": {"schema": {"type": "string", "format": "binary"}},
}
_OTLP_REFUSALS = (
    ("400", "Not an OTLP export: a google.rpc.Status `{code, message}`."),
    ("413", "Over 16 MiB, sent or once inflated."),
    ("415", "Another Content-Type or Content-Encoding: a google.rpc.Status."),
)


def _otlp_operation(op: dict[str, Any]) -> None:
    """The OTLP receiver's routes (api/otlp_routes.py): OTLP in, OTLP answers out."""
    op["requestBody"] = {"required": True, "content": _OTLP_CONTENT}
    responses: dict[str, Any] = {
        "200": {
            "description": "The OTLP export response; `partialSuccess` when records were refused.",
            "content": _OTLP_CONTENT,
        }
    }
    for code, why in _OTLP_REFUSALS:
        responses[code] = {"description": why, "content": _OTLP_CONTENT}
    for code in ("401", "403", "503"):
        responses[code] = _error(code)
    op["responses"] = responses


def _error(code: str) -> dict[str, Any]:
    return {
        "description": _DESCRIPTIONS[code],
        "content": {"application/json": {"schema": _ERROR_REF}},
    }


def _not_nullable(parameter: dict[str, Any]) -> None:
    # A query or header parameter is absent or a string on the wire, never JSON null:
    # FastAPI's `X | None` becomes plain X (the parameter stays optional).
    schema = parameter.get("schema", {})
    options = schema.get("anyOf")
    if isinstance(options, list):
        kept = [o for o in options if o.get("type") != "null"]
        if len(kept) == 1 and len(kept) < len(options):
            del schema["anyOf"]
            schema.update(kept[0])


def _json_any() -> dict[str, Any]:
    return {"application/json": {"schema": {"type": "object", "additionalProperties": True}}}


_NOT_WORD = re.compile(r"\W")


def hook_route_operations() -> dict[str, dict[str, Any]]:
    """The hook routes' OpenAPI path items, which FastAPI does not document (they are
    Starlette routes: api/hook_routes.py); `complete` adds their errors."""
    paths: dict[str, dict[str, Any]] = {}
    for route in (*HOOK_ROUTES, *OTLP_ROUTES):
        name = route.endpoint.__name__
        doc = inspect.cleandoc(route.endpoint.__doc__ or "")
        operation: dict[str, Any] = {
            "tags": [route.tag],
            "summary": name.replace("_", " ").title(),
            "description": doc,
            "operationId": f"{name}{_NOT_WORD.sub('_', route.path)}_post",
            "responses": {
                "200": {
                    "description": "Successful Response",
                    "content": {"application/json": {"schema": {}}},
                }
            },
        }
        if route.parameters:
            operation["parameters"] = list(route.parameters)
        if route.body is not None:
            content = {"application/json": {"schema": route.body}}
            operation["requestBody"] = {"required": True, "content": content}
        paths[route.path] = {"post": operation}
    return paths
