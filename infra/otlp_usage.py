"""Which OpenTelemetry log records are model requests, and what each one reported.

Input is an OTLP logs export in its JSON shape (protobuf bodies are converted to it by
infra/otlp_wire.py). Each runtime is known by its resource's `service.name`; of its
records, the one event per model request is read (docs/usage.md has the table):

| runtime      | service.name            | event                                    |
|--------------|-------------------------|------------------------------------------|
| Claude Code  | `claude-code`           | `claude_code.api_request`                |
| Gemini CLI   | `gemini-cli`            | `gemini_cli.api_response`                |
| Codex        | `codex_exec`, `codex_*` | `codex.sse_event`, `response.completed`  |

Everything else (other events, other services, attributes not in the table) is ignored,
never refused: an exporter must not fail because a runtime added something. Metrics are
never counted as usage (docs/usage.md says why): they repeat the same requests summed up.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

from domain.model_usage import ReportedRequest

CLAUDE_CODE: Final = "claude-code"
GEMINI_CLI: Final = "gemini-cli"
CODEX: Final = "codex"
# Bounds on what one request may claim (a runtime's counters are far below them).
MAX_TOKENS: Final = 10**12
MAX_COST_USD: Final = 10.0**9
SHORT_TEXT_MAX: Final = 256


@dataclass(frozen=True, slots=True)
class MappedLogs:
    """What an export held: the requests it reported, and how many records were
    refused (a model request whose figures are not numbers), with why."""

    requests: list[ReportedRequest]
    rejected: int
    problem: str | None


class BadRecord(ValueError):
    """A model-request record whose figures cannot be read."""


def attributes(items: Any) -> dict[str, Any]:
    """An OTLP attribute list as a plain dict (scalars only; arrays and maps are left out)."""
    found: dict[str, Any] = {}
    if not isinstance(items, list):
        return found
    for item in items:
        if not isinstance(item, dict) or not isinstance(item.get("key"), str):
            continue
        value = item.get("value")
        if not isinstance(value, dict):
            continue
        for kind in ("stringValue", "intValue", "doubleValue", "boolValue"):
            if kind in value:
                found[item["key"]] = value[kind]
                break
    return found


def _event_name(record: Mapping[str, Any], attrs: Mapping[str, Any]) -> str | None:
    name = attrs.get("event.name") or record.get("eventName")
    if not name:
        body = record.get("body")
        name = body.get("stringValue") if isinstance(body, dict) else None
    return name if isinstance(name, str) else None


def _count(attrs: Mapping[str, Any], *keys: str) -> int:
    """The sum of integer attributes (absent ones count 0); BadRecord for a non-number."""
    total = 0
    for key in keys:
        value = attrs.get(key)
        if value is None:
            continue
        if isinstance(value, bool):
            raise BadRecord(f"{key} is not a number")
        try:
            number = int(value)  # OTLP/JSON spells 64-bit integers as strings
        except (TypeError, ValueError, OverflowError):
            raise BadRecord(f"{key} is not a number") from None
        if not 0 <= number <= MAX_TOKENS:
            raise BadRecord(f"{key} is out of range")
        total += number
    return total


def _optional_int(attrs: Mapping[str, Any], key: str) -> int | None:
    return _count(attrs, key) if attrs.get(key) is not None else None


def _cost(attrs: Mapping[str, Any], key: str) -> float | None:
    value = attrs.get(key)
    if value is None:
        return None
    try:
        cost = float(value)
    except (TypeError, ValueError):
        raise BadRecord(f"{key} is not a number") from None
    if isinstance(value, bool) or not 0 <= cost <= MAX_COST_USD:  # also refuses NaN
        raise BadRecord(f"{key} is out of range")
    return cost


def _text(attrs: Mapping[str, Any], key: str) -> str | None:
    value = attrs.get(key)
    if value is None or value == "":
        return None
    # Kept text must be storable everywhere: no NULs, no lone surrogates.
    text = str(value)[:SHORT_TEXT_MAX].replace("\x00", "")
    return text.encode("utf-8", "replace").decode("utf-8")


def record_time(record: Mapping[str, Any]) -> datetime:
    """When the record says it happened (its time, else when it was observed)."""
    for key in ("timeUnixNano", "observedTimeUnixNano"):
        try:
            nanos = int(record.get(key) or 0)
        except (TypeError, ValueError):
            continue
        if 0 < nanos < 2**63:
            return datetime.fromtimestamp(nanos / 1e9, UTC)
    raise BadRecord("the record has no time")


def report_key(
    agent: str, session: str, record: Mapping[str, Any], attrs: Mapping[str, Any]
) -> str:
    """What identifies a report: its session, its time and every attribute it carries
    (Claude Code's `event.sequence` among them). A retried export repeats all of them."""
    # Values as text: OTLP/JSON may spell a 64-bit integer as a number or a string, and
    # the same record sent as protobuf and as JSON must give the same key.
    canonical = json.dumps(
        [
            agent,
            session,
            str(record.get("timeUnixNano")),
            sorted((k, str(v)) for k, v in attrs.items()),
        ]
    )
    return hashlib.sha256(canonical.encode()).hexdigest()


def _claude_code(record: Mapping[str, Any], attrs: Mapping[str, Any]) -> ReportedRequest:
    session = _text(attrs, "session.id") or ""
    return ReportedRequest(
        agent=CLAUDE_CODE,
        agent_session_id=session,
        key=report_key(CLAUDE_CODE, session, record, attrs),
        model=_text(attrs, "model"),
        input_tokens=_count(attrs, "input_tokens"),
        output_tokens=_count(attrs, "output_tokens"),
        cache_read_tokens=_count(attrs, "cache_read_tokens"),
        cache_creation_tokens=_count(attrs, "cache_creation_tokens"),
        cost_usd=_cost(attrs, "cost_usd"),
        duration_ms=_optional_int(attrs, "duration_ms"),
        prompt_id=_text(attrs, "prompt.id"),
        requested_at=record_time(record),
    )


def _gemini_cli(record: Mapping[str, Any], attrs: Mapping[str, Any]) -> ReportedRequest:
    session = _text(attrs, "session.id") or ""
    return ReportedRequest(
        agent=GEMINI_CLI,
        agent_session_id=session,
        key=report_key(GEMINI_CLI, session, record, attrs),
        model=_text(attrs, "model"),
        # Gemini's prompt count includes the cached part, as its API bills it.
        input_tokens=_count(attrs, "input_token_count"),
        # Thinking is billed as output.
        output_tokens=_count(attrs, "output_token_count", "thoughts_token_count"),
        cache_read_tokens=_count(attrs, "cached_content_token_count"),
        cache_creation_tokens=0,
        cost_usd=None,
        duration_ms=_optional_int(attrs, "duration_ms"),
        prompt_id=_text(attrs, "prompt_id"),
        requested_at=record_time(record),
    )


def _codex(record: Mapping[str, Any], attrs: Mapping[str, Any]) -> ReportedRequest:
    session = _text(attrs, "conversation.id") or ""
    return ReportedRequest(
        agent=CODEX,
        agent_session_id=session,
        key=report_key(CODEX, session, record, attrs),
        model=_text(attrs, "model"),
        # The Responses API's counts: input includes the cached part, output the reasoning.
        input_tokens=_count(attrs, "input_token_count"),
        output_tokens=_count(attrs, "output_token_count"),
        cache_read_tokens=_count(attrs, "cached_token_count"),
        cache_creation_tokens=_count(attrs, "cache_write_token_count"),
        cost_usd=None,
        duration_ms=None,  # reported on codex.api_request, which names no response
        prompt_id=None,
        requested_at=record_time(record),
    )


Mapper = Callable[[Mapping[str, Any], Mapping[str, Any]], ReportedRequest]
# service.name -> the event names of one model request (with and without the prefix
# some exporters leave out of `event.name`), and how to read one.
MAPPINGS: Final[dict[str, tuple[frozenset[str], Mapper]]] = {
    CLAUDE_CODE: (frozenset({"claude_code.api_request", "api_request"}), _claude_code),
    GEMINI_CLI: (frozenset({"gemini_cli.api_response"}), _gemini_cli),
    CODEX: (frozenset({"codex.sse_event"}), _codex),
}


def _runtime(service: str | None) -> str:
    """The mapping a service name selects: Codex names its service by how it was started
    (`codex_exec` for `codex exec`, other `codex_*` originators)."""
    if service and service.startswith("codex_"):
        return CODEX
    return service or ""


def _is_model_request(runtime: str, attrs: Mapping[str, Any]) -> bool:
    """Codex reports every server-sent event; one per response carries its token counts."""
    if runtime != CODEX:
        return True
    return attrs.get("event.kind") == "response.completed" and "input_token_count" in attrs


def _records(payload: Any) -> Iterator[tuple[str | None, dict[str, Any]]]:
    """(service.name, record) of every log record of an export, whatever else it holds."""
    if not isinstance(payload, dict):
        return
    for resource_logs in _listed(payload, "resourceLogs"):
        if not isinstance(resource_logs, dict):
            continue
        resource = resource_logs.get("resource")
        service = attributes(resource.get("attributes") if isinstance(resource, dict) else None)
        name = service.get("service.name")
        for scope_logs in _listed(resource_logs, "scopeLogs"):
            if not isinstance(scope_logs, dict):
                continue
            for record in _listed(scope_logs, "logRecords"):
                if isinstance(record, dict):
                    yield (name if isinstance(name, str) else None), record


def _listed(container: dict[str, Any], key: str) -> list[Any]:
    """A repeated field of the request; absent or not a list (`"scopeLogs": 3`) is taken
    as empty, like any other part of an export nothing can be read from."""
    value = container.get(key)
    return value if isinstance(value, list) else []


def model_requests(payload: Any) -> MappedLogs:
    """The model requests an OTLP logs export reports (see the table above)."""
    requests: list[ReportedRequest] = []
    rejected = 0
    problem: str | None = None
    for service, record in _records(payload):
        runtime = _runtime(service)
        mapping = MAPPINGS.get(runtime)
        if mapping is None:
            continue
        events, read = mapping
        attrs = attributes(record.get("attributes"))
        if _event_name(record, attrs) not in events or not _is_model_request(runtime, attrs):
            continue
        try:
            reported = read(record, attrs)
            if not reported.agent_session_id:
                raise BadRecord("session.id is missing")
        except BadRecord as exc:
            rejected += 1
            problem = problem or f"A {service} model request was refused: {exc}."
            continue
        requests.append(reported)
    return MappedLogs(requests, rejected, problem)


def log_record_count(payload: Any) -> int:
    """How many log records an export holds (what a partial success counts against)."""
    return sum(1 for _ in _records(payload))
