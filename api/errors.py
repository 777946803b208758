"""One registry mapping error families to status codes and the {error, message} body."""

from __future__ import annotations

import logging
import sqlite3
from typing import Any

import psycopg
from eventsourcing.persistence import IntegrityError, OperationalError, PersistenceError
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from psycopg_pool import PoolTimeout
from starlette.exceptions import HTTPException as StarletteHTTPException

from api.metrics import DATABASE_UNAVAILABLE
from domain.errors import Conflict, DomainError, NotFound, RuleViolation

log = logging.getLogger(__name__)


class ApiError(Exception):
    """An error raised by the API layer itself, with its status and code."""

    def __init__(self, status: int, code: str, message: str, **extra: Any) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.extra = extra


class RefusedBody(StarletteHTTPException):
    """An ApiError raised while FastAPI decodes a body, which it lets through only as an
    HTTPException (anything else becomes its own generic 400)."""

    def __init__(self, error: ApiError) -> None:
        super().__init__(error.status, error.message)
        self.error = error


def error_response(status: int, code: str, message: str, **extra: Any) -> JSONResponse:
    return JSONResponse({"error": code, "message": message, **extra}, status_code=status)


_DOMAIN_STATUS: list[tuple[type[DomainError], int]] = [
    (NotFound, 404),
    (Conflict, 409),
    (RuleViolation, 422),
]

DATABASE_DOWN: tuple[type[Exception], ...] = (
    OperationalError,
    PoolTimeout,
    psycopg.OperationalError,
    sqlite3.OperationalError,
    PersistenceError,
)


def _validation_message(exc: RequestValidationError) -> tuple[int, str, str, list[dict[str, Any]]]:
    errors = exc.errors()
    details = [
        {"field": ".".join(str(p) for p in e.get("loc", ()) if p != "body"), "problem": e["msg"]}
        for e in errors
    ]
    if any(e.get("type") == "json_invalid" for e in errors):
        return 400, "invalid_json", "The request body is not valid JSON.", []
    first = details[0] if details else {"field": "", "problem": "invalid input"}
    extra_field = next((e for e in errors if e.get("type") == "extra_forbidden"), None)
    if extra_field is not None:
        name = ".".join(str(p) for p in extra_field["loc"] if p != "body")
        return 422, "unknown_field", f"Unknown field {name!r}; remove it.", details
    where = f"{first['field']}: " if first["field"] else ""
    return 422, "validation_error", f"{where}{first['problem']}.", details


def install_error_handlers(app: FastAPI) -> None:
    """Register handlers; found along the class hierarchy, so one covers a family."""

    @app.exception_handler(ApiError)
    async def api_error(_: Request, exc: ApiError) -> JSONResponse:
        return error_response(exc.status, exc.code, exc.message, **exc.extra)

    @app.exception_handler(RefusedBody)
    async def refused_body(_: Request, exc: RefusedBody) -> JSONResponse:
        return await api_error(_, exc.error)

    @app.exception_handler(DomainError)
    async def domain_error(_: Request, exc: DomainError) -> JSONResponse:
        status = next((s for cls, s in _DOMAIN_STATUS if isinstance(exc, cls)), 400)
        return error_response(status, exc.code, exc.message, **exc.extra)

    @app.exception_handler(IntegrityError)
    async def concurrency_conflict(_: Request, exc: IntegrityError) -> JSONResponse:
        return error_response(
            409, "conflict", "Another request changed this resource at the same time; retry."
        )

    @app.exception_handler(RequestValidationError)
    async def validation(_: Request, exc: RequestValidationError) -> JSONResponse:
        status, code, message, details = _validation_message(exc)
        extra = {"details": details} if details else {}
        return error_response(status, code, message, **extra)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        codes = {
            400: "invalid_json",  # FastAPI's only 400: a body it could not parse
            404: "not_found",
            405: "method_not_allowed",
            413: "payload_too_large",
        }
        code = codes.get(exc.status_code, "http_error")
        message = exc.detail if isinstance(exc.detail, str) else "Request failed."
        if exc.status_code == 404 and message == "Not Found":
            message = "No such route."
        response = error_response(exc.status_code, code, message)
        if exc.headers:
            response.headers.update(exc.headers)  # e.g. Allow on a 405 (RFC 9110)
        return response

    for family in DATABASE_DOWN:

        @app.exception_handler(family)
        async def database_down(_: Request, exc: Exception) -> JSONResponse:
            log.warning("database unavailable: %s", type(exc).__name__)
            DATABASE_UNAVAILABLE.inc()
            return error_response(
                503, "database_unavailable", "The database is unreachable; retry shortly."
            )

    @app.exception_handler(Exception)
    async def unexpected(_: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error")
        return error_response(500, "internal_error", "An unexpected error occurred.")
