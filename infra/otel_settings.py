"""Where hook decisions are exported as OpenTelemetry spans, read from the standard
`OTEL_*` variables (the OTLP exporter and batch span processor settings of the
OpenTelemetry specification), so a collector configured for other services needs no
Tachograph-specific setting.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

# What the OTLP/HTTP exporter shipped with Tachograph speaks.
HTTP_PROTOBUF = "http/protobuf"
_TRACES_PATH = "/v1/traces"

# `_Reader.number` of infra/settings.py: (name, default, lo, hi, kind) -> value, raising
# SettingsError naming the variable.
Number = Callable[[str, float, float, float, type], float]


class OtelSettingsError(ValueError):
    """A setting the decision export cannot work with (its message names it)."""


@dataclass(frozen=True)
class DecisionExportSettings:
    """The traces endpoint and the bounds of the export queue."""

    endpoint: str
    # Decisions waiting to be exported; past it, new ones are dropped and counted.
    max_queue: int = 2048
    # How often the export thread sends what has queued, and at most how many per request.
    schedule_delay_s: float = 1.0
    max_batch: int = 512


def decision_export_settings(
    env: Mapping[str, str], number: Number
) -> DecisionExportSettings | None:
    """The export, when a traces endpoint is configured and the SDK is not disabled."""
    if (env.get("OTEL_SDK_DISABLED") or "").strip().lower() == "true":
        return None
    endpoint = _traces_endpoint(env)
    if endpoint is None:
        return None
    for name in ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"):
        protocol = (env.get(name) or "").strip()
        if protocol:
            if protocol != HTTP_PROTOBUF:
                raise OtelSettingsError(
                    f"{name}: decision spans are exported as {HTTP_PROTOBUF} only, got {protocol!r}"
                )
            break
    return DecisionExportSettings(
        endpoint=endpoint,
        max_queue=int(number("OTEL_BSP_MAX_QUEUE_SIZE", 2048, 1, 1_000_000, int)),
        schedule_delay_s=number("OTEL_BSP_SCHEDULE_DELAY", 1000, 10, 3_600_000, int) / 1000,
        max_batch=int(number("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", 512, 1, 100_000, int)),
    )


def _traces_endpoint(env: Mapping[str, str]) -> str | None:
    """The signal endpoint as the OTLP exporter specification builds it: the traces one
    as given, else the base endpoint with /v1/traces appended."""
    traces = (env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or "").strip()
    if traces:
        _check_url("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", traces)
        return traces
    base = (env.get("OTEL_EXPORTER_OTLP_ENDPOINT") or "").strip()
    if not base:
        return None
    _check_url("OTEL_EXPORTER_OTLP_ENDPOINT", base)
    return base.rstrip("/") + _TRACES_PATH


def _check_url(name: str, url: str) -> None:
    if not url.startswith(("http://", "https://")):
        raise OtelSettingsError(f"{name}: expected an http:// or https:// URL, got {url!r}")
