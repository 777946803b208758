"""How FastAPI itself is configured, shared by the app and the bench's baseline endpoints."""

from __future__ import annotations

import inspect
import os
from typing import Any

from fastapi import FastAPI


def framework_options() -> dict[str, Any]:
    """FastAPI keyword arguments: its own OpenTelemetry only when the operator asked for it.

    FastAPI's built-in OpenTelemetry support asks on every request whether a provider
    has been configured (environment lookups: ~9% of the ingest route's CPU). Metrics
    are Prometheus's job here (`/metrics`), so it is off unless FastAPI's own switch,
    FASTAPI_OTEL_AUTO_CONFIGURE, is on. An OTLP endpoint alone turns on the export of
    hook decisions (infra/decision_export.py), not this per-request tracing.
    """
    if "telemetry" not in inspect.signature(FastAPI.__init__).parameters:
        return {}  # a FastAPI without built-in telemetry
    if otel_requested(os.environ):
        return {}
    return {"telemetry": {"tracing": False, "metrics": False, "logs": False}}


def otel_requested(env: dict[str, str] | os._Environ[str]) -> bool:
    """Whether the environment asks FastAPI to trace its requests (FastAPI's own switch)."""
    return env.get("FASTAPI_OTEL_AUTO_CONFIGURE", "").strip().lower() == "true"
