"""FastAPI's own OpenTelemetry instrumentation: on only when FASTAPI_OTEL_AUTO_CONFIGURE asks
for it; an OTLP endpoint alone exports hook decisions, not FastAPI's request spans."""

from __future__ import annotations

import inspect

import pytest
from fastapi import FastAPI

from api.framework import framework_options, otel_requested


@pytest.mark.parametrize(
    ("env", "requested"),
    [
        ({}, False),
        ({"FASTAPI_OTEL_AUTO_CONFIGURE": "true"}, True),
        ({"FASTAPI_OTEL_AUTO_CONFIGURE": "false"}, False),
        ({"FASTAPI_OTEL_AUTO_CONFIGURE": "TRUE"}, True),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, False),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318"}, False),
        (
            {
                "FASTAPI_OTEL_AUTO_CONFIGURE": "true",
                "OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318",
            },
            True,
        ),
        ({"OTEL_SERVICE_NAME": "tachograph"}, False),
    ],
)
def test_otel_is_requested_only_by_fastapi_switch(env: dict[str, str], requested: bool) -> None:
    assert otel_requested(env) is requested


def test_without_otel_settings_fastapi_telemetry_is_off(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in ("FASTAPI_OTEL_AUTO_CONFIGURE", "OTEL_EXPORTER_OTLP_ENDPOINT"):
        monkeypatch.delenv(key, raising=False)
    has_telemetry = "telemetry" in inspect.signature(FastAPI.__init__).parameters
    off = {"telemetry": {"tracing": False, "metrics": False, "logs": False}}
    assert framework_options() == (off if has_telemetry else {})
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318")
    assert framework_options() == (off if has_telemetry else {})  # decision spans only
    monkeypatch.setenv("FASTAPI_OTEL_AUTO_CONFIGURE", "true")
    assert framework_options() == {}
