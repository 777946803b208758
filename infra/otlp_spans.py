"""Decision spans as the body of an OTLP/HTTP ExportTraceServiceRequest, encoded directly.

The OpenTelemetry SDK's span objects and its encoder cost ~115 µs of CPU per decision
(the span, then a protobuf message per attribute, then its serialisation); writing the
few message types a span needs straight to the protobuf wire format costs a fifth of
that, on the same server CPU as the hook path (docs/performance.md). The messages are
those of opentelemetry-proto (`opentelemetry/proto/trace/v1/trace.proto`, common.proto,
resource.proto, collector/trace/v1/trace_service.proto); the field numbers below are
theirs, and tests decode what is sent with its generated classes. `http/json` is the
OTLP JSON mapping of the same request (hex ids, 64-bit integers as strings).
"""

from __future__ import annotations

import json
import re
import struct
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

# trace id (16 bytes), span id (8), parent span id (8, or empty for a root), start and
# end in ns since the epoch, attributes (str, int or bool values).
DecisionSpan = tuple[bytes, bytes, bytes, int, int, Mapping[str, Any]]
Encoder = Callable[[Sequence[DecisionSpan]], bytes]

SCOPE_NAME: Final = "tachograph.decisions"
SPAN_KIND_INTERNAL: Final = 1
PROTOBUF_CONTENT_TYPE: Final = "application/x-protobuf"
JSON_CONTENT_TYPE: Final = "application/json"

# W3C trace context: version-traceid-parentid-flags (version ff is invalid; all-zero ids too).
_TRACEPARENT = re.compile(r"^(?!ff)[0-9a-f]{2}-([0-9a-f]{32})-([0-9a-f]{16})-[0-9a-f]{2}")
_ZERO_TRACE = "0" * 32
_ZERO_SPAN = "0" * 16


def parent_of(traceparent: str | None) -> tuple[bytes, bytes] | None:
    """The (trace id, span id) a valid `traceparent` names; None for absent or invalid."""
    if not traceparent:
        return None
    found = _TRACEPARENT.match(traceparent.strip())
    if found is None or found[1] == _ZERO_TRACE or found[2] == _ZERO_SPAN:
        return None
    return bytes.fromhex(found[1]), bytes.fromhex(found[2])


# --- protobuf wire format ---------------------------------------------------------------


def _varint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


_SMALL: Final = [_varint(n) for n in range(128)]


def _length(payload: bytes) -> bytes:
    size = len(payload)
    return _SMALL[size] if size < 128 else _varint(size)


def _field(tag: bytes, payload: bytes) -> bytes:
    """A length-delimited field (tag already holds the field number and wire type 2)."""
    return tag + _length(payload) + payload


# Field tags: (number << 3) | wire type.
_F1, _F2 = b"\x0a", b"\x12"  # field 1 and 2, length-delimited
_SPAN_TRACE_ID, _SPAN_ID, _SPAN_PARENT = b"\x0a\x10", b"\x12\x08", b"\x22\x08"
_SPAN_NAME, _SPAN_KIND, _SPAN_ATTRIBUTE = b"\x2a", b"\x30", b"\x4a"
_SPAN_TIMES = struct.Struct("<BQBQ")  # start (field 7) and end (8), fixed64
_BOOL = {True: b"\x12\x02\x10\x01", False: b"\x12\x02\x10\x00"}  # value: AnyValue.bool_value
_INT_VALUE, _STRING_VALUE = b"\x18", b"\x0a"  # AnyValue.int_value (3), string_value (1)

_keys: dict[str, bytes] = {}


def _key(name: str) -> bytes:
    """KeyValue.key, encoded once per attribute name (the names are a fixed set)."""
    encoded = _keys.get(name)
    if encoded is None:
        encoded = _keys[name] = _field(_F1, name.encode())
    return encoded


def _attribute(name: str, value: Any) -> bytes:
    if value is True or value is False:
        encoded = _BOOL[value]
    elif isinstance(value, int):
        number = _INT_VALUE + _varint(value if value >= 0 else value + (1 << 64))
        encoded = _F2 + _length(number) + number
    else:
        text = str(value).encode()
        encoded = _field(_F2, _STRING_VALUE + _length(text) + text)
    body = _key(name) + encoded
    return _SPAN_ATTRIBUTE + _length(body) + body


def _resource_and_scope(resource: Mapping[str, str]) -> tuple[bytes, bytes]:
    attributes = b"".join(
        _field(_F1, _key(k) + _field(_F2, _field(_F1, v.encode()))) for k, v in resource.items()
    )
    return _field(_F1, attributes), _field(_F1, _field(_F1, SCOPE_NAME.encode()))


def protobuf_encoder(resource: Mapping[str, str], span_name: str) -> Encoder:
    """An encoder of ExportTraceServiceRequest bodies for one resource and span name."""
    resource_field, scope_field = _resource_and_scope(resource)
    kind = _SPAN_KIND + bytes([SPAN_KIND_INTERNAL])
    name_and_kind = _field(_SPAN_NAME, span_name.encode()) + kind

    def encode(spans: Sequence[DecisionSpan]) -> bytes:
        encoded = [scope_field]
        pack = _SPAN_TIMES.pack
        for trace_id, span_id, parent, start, end, attributes in spans:
            body = b"".join(
                [
                    _SPAN_TRACE_ID + trace_id + _SPAN_ID + span_id,
                    _SPAN_PARENT + parent if parent else b"",
                    name_and_kind,
                    pack(0x39, start, 0x41, end),
                    *[_attribute(k, v) for k, v in attributes.items()],
                ]
            )
            encoded.append(_F2 + _length(body) + body)
        resource_spans = resource_field + _field(_F2, b"".join(encoded))
        return _field(_F1, resource_spans)

    return encode


# --- OTLP JSON ----------------------------------------------------------------------------


def _json_value(value: Any) -> dict[str, Any]:
    if value is True or value is False:
        return {"boolValue": value}
    if isinstance(value, int):
        return {"intValue": str(value)}
    return {"stringValue": str(value)}


def json_encoder(resource: Mapping[str, str], span_name: str) -> Encoder:
    """An encoder of the same request in the OTLP JSON mapping (protocol `http/json`)."""
    attributes = [{"key": k, "value": {"stringValue": v}} for k, v in resource.items()]
    resource_json = {"attributes": attributes}

    def encode(spans: Sequence[DecisionSpan]) -> bytes:
        encoded = []
        for trace_id, span_id, parent, start, end, attributes in spans:
            span: dict[str, Any] = {
                "traceId": trace_id.hex(),
                "spanId": span_id.hex(),
                "name": span_name,
                "kind": SPAN_KIND_INTERNAL,
                "startTimeUnixNano": str(start),
                "endTimeUnixNano": str(end),
                "attributes": [{"key": k, "value": _json_value(v)} for k, v in attributes.items()],
            }
            if parent:
                span["parentSpanId"] = parent.hex()
            encoded.append(span)
        request = {
            "resourceSpans": [
                {
                    "resource": resource_json,
                    "scopeSpans": [{"scope": {"name": SCOPE_NAME}, "spans": encoded}],
                }
            ]
        }
        return json.dumps(request, separators=(",", ":")).encode()

    return encode
