"""OTLP/HTTP bodies in and answers out: JSON or protobuf, gzip or not.

Requests are decoded into OTLP's JSON shape (camelCase fields, 64-bit integers as
strings), whichever encoding they came in, so one reader (infra/otlp_usage.py) serves
both. Protobuf is decoded with the OpenTelemetry project's own generated classes
(`opentelemetry-proto`). Answers follow the OTLP/HTTP specification: the export
response, with `partialSuccess` when records were refused, in the request's encoding;
for a bad request, status 400 with a `google.rpc.Status` body.
"""

from __future__ import annotations

import json
import zlib
from dataclasses import dataclass
from typing import Any, Final, Literal

from google.protobuf.json_format import MessageToDict, ParseDict
from google.protobuf.message import DecodeError, Message
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import (
    ExportLogsServiceRequest,
    ExportLogsServiceResponse,
)
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

JSON: Final = "application/json"
PROTOBUF: Final = "application/x-protobuf"
Encoding = Literal["application/json", "application/x-protobuf"]
Signal = Literal["logs", "metrics", "traces"]
# google.rpc.Code values the answers use.
INVALID_ARGUMENT: Final = 3

_REQUESTS: Final[dict[str, type[Message]]] = {
    "logs": ExportLogsServiceRequest,
    "metrics": ExportMetricsServiceRequest,
    "traces": ExportTraceServiceRequest,
}
# The export responses, and the partial success's count field of each (JSON spelling).
_RESPONSES: Final[dict[str, tuple[type[Message], str]]] = {
    "logs": (ExportLogsServiceResponse, "rejectedLogRecords"),
    "metrics": (ExportMetricsServiceResponse, "rejectedDataPoints"),
    "traces": (ExportTraceServiceResponse, "rejectedSpans"),
}


@dataclass(frozen=True)
class OtlpBodyError(Exception):
    """A request body the receiver cannot read: the HTTP status and why."""

    status: int
    message: str


def encoding_of(content_type: str | None) -> Encoding:
    """The body's encoding from its Content-Type; 415 for any other."""
    media = (content_type or "").split(";")[0].strip().lower()
    if media == JSON:
        return JSON
    if media == PROTOBUF:
        return PROTOBUF
    raise OtlpBodyError(415, f"Content-Type must be {JSON} or {PROTOBUF}, not {media or 'absent'}.")


def inflate(body: bytes, content_encoding: str | None, cap: int) -> bytes:
    """The body without its Content-Encoding (gzip, or none), at most `cap` bytes."""
    coding = (content_encoding or "identity").strip().lower()
    if coding == "identity":
        return body
    if coding != "gzip":
        raise OtlpBodyError(415, f"Content-Encoding {coding!r} is not supported; send gzip.")
    inflater = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
    try:
        out = inflater.decompress(body, cap + 1)
    except zlib.error:
        raise OtlpBodyError(400, "The body is not valid gzip.") from None
    if len(out) > cap or inflater.unconsumed_tail:
        raise OtlpBodyError(413, f"The body inflates beyond {cap // 1024} KiB; send less.")
    if not inflater.eof:
        raise OtlpBodyError(400, "The gzip body is cut short.")
    return out


def _no_constant(name: str) -> Any:
    raise ValueError(f"contains {name}, which is not JSON")


# Not the API's strict decoder: an export's attributes are nested past what it reads at a
# glance, and walking every value cost more than the rest of a request. Nothing here is
# stored as sent: the few values kept are cleaned where they are read
# (infra/otlp_usage.py: no NULs, no lone surrogates), and NaN is refused.
_JSON: Final = json.JSONDecoder(parse_constant=_no_constant)


def decode(signal: Signal, body: bytes, encoding: Encoding) -> dict[str, Any]:
    """An export request of `signal` in OTLP's JSON shape; OtlpBodyError (400) if unreadable."""
    if encoding == PROTOBUF:
        message = _REQUESTS[signal]()
        try:
            message.ParseFromString(body)
        except (DecodeError, RecursionError):
            raise OtlpBodyError(400, f"The body is not an OTLP {signal} protobuf.") from None
        decoded: dict[str, Any] = MessageToDict(message)
        return decoded
    try:
        value = _JSON.decode(body.decode("utf-8"))
    except UnicodeDecodeError:
        raise OtlpBodyError(400, "The request body is not UTF-8 text.") from None
    except json.JSONDecodeError as exc:
        problem = f"{exc.msg}: line {exc.lineno} column {exc.colno}"
        raise OtlpBodyError(400, f"The request body is not valid JSON ({problem}).") from None
    except ValueError as exc:  # NaN or Infinity
        raise OtlpBodyError(400, f"The request body {exc}.") from None
    except RecursionError:
        raise OtlpBodyError(400, "The request body is nested too deeply.") from None
    if not isinstance(value, dict):
        raise OtlpBodyError(400, f"The body is not an OTLP {signal} request (a JSON object).")
    return value


def success(
    signal: Signal, encoding: Encoding, rejected: int = 0, message: str | None = None
) -> bytes:
    """The export response: empty when everything was taken, else its partial success."""
    response, field = _RESPONSES[signal]
    partial = {field: str(rejected), "errorMessage": message or ""}
    if encoding == JSON:
        return json.dumps({"partialSuccess": partial} if rejected else {}).encode()
    encoded: bytes = ParseDict(
        {"partialSuccess": partial} if rejected else {}, response()
    ).SerializeToString()
    return encoded


def status(encoding: Encoding, code: int, message: str) -> bytes:
    """A `google.rpc.Status` (code and message; no details), in the request's encoding.

    Its two fields are written by hand: the OTLP packages do not ship the class, and
    the wire form of two scalar fields is fixed by the protobuf encoding itself.
    """
    if encoding == JSON:
        return json.dumps({"code": code, "message": message}).encode()
    text = message.encode()
    return b"\x08" + _varint(code) + b"\x12" + _varint(len(text)) + text


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)
