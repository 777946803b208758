"""A stand-in OpenTelemetry collector on loopback: OTLP/HTTP traces in, spans kept.

It decodes `/v1/traces` in protobuf with the OpenTelemetry protocol's own generated
classes (opentelemetry-proto), or in the OTLP JSON mapping (hex ids, 64-bit integers as
strings), gzip included, and answers as a collector does.
"""

from __future__ import annotations

import gzip
import json
import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue


@dataclass(frozen=True)
class ReceivedSpan:
    name: str
    trace_id: str
    span_id: str
    parent_span_id: str
    kind: int
    start_ns: int
    end_ns: int
    attributes: dict[str, Any]
    resource: dict[str, Any]


def _json_value(value: dict[str, Any]) -> Any:
    [(kind, raw)] = value.items()
    return int(raw) if kind == "intValue" else raw


def _json_spans(raw: bytes) -> list[ReceivedSpan]:
    """Spans of an OTLP JSON ExportTraceServiceRequest."""
    spans = []
    for resource_spans in json.loads(raw)["resourceSpans"]:
        resource_attributes = resource_spans["resource"]["attributes"]
        resource = {a["key"]: _json_value(a["value"]) for a in resource_attributes}
        for scope_spans in resource_spans["scopeSpans"]:
            for span in scope_spans["spans"]:
                spans.append(
                    ReceivedSpan(
                        name=span["name"],
                        trace_id=span["traceId"],
                        span_id=span["spanId"],
                        parent_span_id=span.get("parentSpanId", ""),
                        kind=span["kind"],
                        start_ns=int(span["startTimeUnixNano"]),
                        end_ns=int(span["endTimeUnixNano"]),
                        attributes={a["key"]: _json_value(a["value"]) for a in span["attributes"]},
                        resource=resource,
                    )
                )
    return spans


def _value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [_value(v) for v in value.array_value.values]
    return getattr(value, kind) if kind is not None else None


def _protobuf_spans(request: ExportTraceServiceRequest) -> list[ReceivedSpan]:
    spans = []
    for resource_spans in request.resource_spans:
        resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                spans.append(
                    ReceivedSpan(
                        name=span.name,
                        trace_id=span.trace_id.hex(),
                        span_id=span.span_id.hex(),
                        parent_span_id=span.parent_span_id.hex(),
                        kind=span.kind,
                        start_ns=span.start_time_unix_nano,
                        end_ns=span.end_time_unix_nano,
                        attributes={a.key: _value(a.value) for a in span.attributes},
                        resource=resource,
                    )
                )
    return spans


class Collector:
    """Keeps every span posted to /v1/traces; `spans()` waits for them."""

    def __init__(self, tls: ssl.SSLContext | None = None) -> None:
        self.received: list[ReceivedSpan] = []
        self.requests = 0
        # The headers of each request (content type, encoding, the exporter's own).
        self.headers: list[dict[str, str]] = []
        # Statuses to answer the next requests with, before taking any (a busy collector).
        self.refusals: list[int] = []
        self._lock = threading.Lock()
        collector = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's naming
                raw = self.rfile.read(int(self.headers.get("content-length", "0")))
                if self.headers.get("content-encoding") == "gzip":
                    raw = gzip.decompress(raw)
                if self.path != "/v1/traces":
                    self._answer(404, b"")
                    return
                with collector._lock:
                    refusal = collector.refusals.pop(0) if collector.refusals else None
                if refusal is not None:
                    self._answer(refusal, b"")
                    return
                headers = {name.lower(): value for name, value in self.headers.items()}
                if headers.get("content-type") == "application/json":
                    collector.keep(_json_spans(raw), headers)
                    self._answer(200, b"{}", "application/json")
                    return
                request = ExportTraceServiceRequest()
                request.ParseFromString(raw)
                collector.keep(_protobuf_spans(request), headers)
                self._answer(200, ExportTraceServiceResponse().SerializeToString())

            def _answer(
                self, status: int, body: bytes, content_type: str = "application/x-protobuf"
            ) -> None:
                self.send_response(status)
                self.send_header("content-type", content_type)
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        if tls is not None:  # an https:// collector
            self._httpd.socket = tls.wrap_socket(self._httpd.socket, server_side=True)
        scheme = "https" if tls is not None else "http"
        self.url = f"{scheme}://127.0.0.1:{self._httpd.server_address[1]}"
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)
        self._thread.start()

    def keep(self, spans: list[ReceivedSpan], headers: dict[str, str]) -> None:
        with self._lock:
            self.received.extend(spans)
            self.headers.append(headers)
            self.requests += 1

    def spans(
        self,
        where: Callable[[ReceivedSpan], bool] = lambda span: True,
        count: int = 1,
        timeout: float = 20,
    ) -> list[ReceivedSpan]:
        """At least `count` received spans matching `where`, waiting up to `timeout`."""
        deadline = time.monotonic() + timeout
        while True:
            with self._lock:
                found = [span for span in self.received if where(span)]
            if len(found) >= count or time.monotonic() > deadline:
                return found
            time.sleep(0.05)

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
