"""Prometheus metrics of the HTTP layer: requests, latency, refusals.

What the log, ingestion and the scheduler count is in infra/metrics.py, the scrape-time
gauges in services/process_metrics.py; all share the process-wide registry that
`/metrics` renders. Routes are labelled by their templates, so label values are bounded.
"""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

from infra.metrics import LATENCY_BUCKETS as _LATENCY_BUCKETS

HTTP_REQUESTS = Counter(
    "tachograph_http_requests_total",
    "HTTP requests by method, route template and status code",
    ["method", "route", "status"],
)
HTTP_LATENCY = Histogram(
    "tachograph_http_request_duration_seconds",
    "HTTP request latency by method and route template",
    ["method", "route"],
    buckets=_LATENCY_BUCKETS,
)
HTTP_IN_FLIGHT = Gauge("tachograph_http_requests_in_flight", "HTTP requests being served")
WEBHOOK_REJECTED = Counter(
    "tachograph_webhook_rejected_total",
    "Coder webhook requests that failed verification, by reason",
    ["reason"],
)
FORBIDDEN = Counter(
    "tachograph_forbidden_total",
    "Requests refused 403 because the credential's role does not reach the route",
    ["route", "role"],
)
UNAUTHORIZED = Counter(
    "tachograph_unauthorized_total",
    "Requests refused 401, by what was wrong with the credential",
    ["reason"],
)
DATABASE_UNAVAILABLE = Counter(
    "tachograph_database_unavailable_total",
    "Requests answered 503 database_unavailable",
)
OTLP_RECORDS = Counter(
    "tachograph_otlp_records_total",
    "OTLP log records and metric exports received, by signal and what became of them "
    "(recorded, repeated, refused, ignored)",
    ["signal", "outcome"],
)
