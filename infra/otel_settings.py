"""Where hook decisions are exported as OpenTelemetry spans, read from the standard
`OTEL_*` variables (the OTLP exporter and batch span processor settings of the
OpenTelemetry specification), so a collector configured for other services needs no
Tachograph-specific setting.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from urllib.parse import unquote

# The OTLP/HTTP encodings decision spans can be sent in.
HTTP_PROTOBUF = "http/protobuf"
HTTP_JSON = "http/json"
PROTOCOLS = (HTTP_PROTOBUF, HTTP_JSON)
COMPRESSIONS = ("gzip", "none")
_TRACES_PATH = "/v1/traces"
DEFAULT_SERVICE = "tachograph"

# `_Reader.number` of infra/settings.py: (name, default, lo, hi, kind) -> value, raising
# SettingsError naming the variable.
Number = Callable[[str, float, float, float, type], float]


class OtelSettingsError(ValueError):
    """A setting the decision export cannot work with (its message names it)."""


@dataclass(frozen=True)
class DecisionExportSettings:
    """The traces endpoint and the bounds of the export queue."""

    endpoint: str
    protocol: str = HTTP_PROTOBUF
    # Sent with every request (OTEL_EXPORTER_OTLP_HEADERS: often a collector's credential).
    headers: tuple[tuple[str, str], ...] = field(default=(), repr=False)
    timeout_s: float = 10.0
    compression: str = "none"
    # TLS: the CA file to trust, and the client certificate and key (mutual TLS).
    certificate: str | None = None
    client_certificate: str | None = None
    client_key: str | None = None
    # The spans' resource (service.name and OTEL_RESOURCE_ATTRIBUTES).
    resource: tuple[tuple[str, str], ...] = (("service.name", DEFAULT_SERVICE),)
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
    protocol = _choice(env, "PROTOCOL", PROTOCOLS) or HTTP_PROTOBUF
    timeout = _signal_name(env, "TIMEOUT") or "OTEL_EXPORTER_OTLP_TIMEOUT"
    return DecisionExportSettings(
        endpoint=endpoint,
        protocol=protocol,
        headers=_headers(env),
        timeout_s=number(timeout, 10, 0.1, 3600, float),
        compression=_choice(env, "COMPRESSION", COMPRESSIONS) or "none",
        certificate=_file(env, "CERTIFICATE"),
        client_certificate=_file(env, "CLIENT_CERTIFICATE"),
        client_key=_file(env, "CLIENT_KEY"),
        resource=_resource(env),
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


def _signal_name(env: Mapping[str, str], suffix: str) -> str | None:
    """The variable that sets this exporter option: the traces one, else the general one."""
    for name in (f"OTEL_EXPORTER_OTLP_TRACES_{suffix}", f"OTEL_EXPORTER_OTLP_{suffix}"):
        if (env.get(name) or "").strip():
            return name
    return None


def _choice(env: Mapping[str, str], suffix: str, allowed: tuple[str, ...]) -> str | None:
    name = _signal_name(env, suffix)
    if name is None:
        return None
    value = env[name].strip().lower()
    if value not in allowed:
        raise OtelSettingsError(f"{name}: expected one of {', '.join(allowed)}, got {value!r}")
    return value


def _file(env: Mapping[str, str], suffix: str) -> str | None:
    name = _signal_name(env, suffix)
    if name is None:
        return None
    path = env[name].strip()
    if not os.path.isfile(path):
        raise OtelSettingsError(f"{name}: no such file: {path!r}")
    return path


def _pairs(name: str, raw: str) -> list[tuple[str, str]]:
    """`key=value,...` with percent-encoded values, as the OTLP specification writes
    headers and resource attributes. The refusal never repeats the value (a header
    often carries a credential)."""
    pairs = []
    for part in raw.split(","):
        if not part.strip():
            continue
        key, sep, value = part.partition("=")
        if not sep or not key.strip():
            raise OtelSettingsError(f"{name}: expected comma-separated key=value pairs")
        pairs.append((key.strip(), unquote(value.strip())))
    return pairs


def _headers(env: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    name = _signal_name(env, "HEADERS")
    return tuple(_pairs(name, env[name])) if name is not None else ()


def _resource(env: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    """service.name=tachograph, overridden by OTEL_RESOURCE_ATTRIBUTES, then by
    OTEL_SERVICE_NAME."""
    resource = {"service.name": DEFAULT_SERVICE}
    resource.update(_pairs("OTEL_RESOURCE_ATTRIBUTES", env.get("OTEL_RESOURCE_ATTRIBUTES") or ""))
    service = (env.get("OTEL_SERVICE_NAME") or "").strip()
    if service:
        resource["service.name"] = service
    return tuple(resource.items())
