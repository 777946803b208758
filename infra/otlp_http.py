"""Encoded span batches POSTed to an OTLP/HTTP traces endpoint, as the OTLP exporter
specification says: the configured headers, gzip when asked, and transient failures
(429, 502, 503, 504, no connection) retried with backoff until the export timeout.
"""

from __future__ import annotations

import gzip
import logging
import random
import ssl
import time

import httpx

from infra.otel_settings import DecisionExportSettings

log = logging.getLogger(__name__)

RETRYABLE = frozenset({429, 502, 503, 504})
FIRST_BACKOFF_S = 1.0


class OtlpHttpSender:
    """One keep-alive connection to the collector, used only by the export thread."""

    def __init__(self, settings: DecisionExportSettings, content_type: str) -> None:
        self._endpoint = settings.endpoint
        self._timeout_s = settings.timeout_s
        self._gzip = settings.compression == "gzip"
        headers = {**dict(settings.headers), "content-type": content_type}
        if self._gzip:
            headers["content-encoding"] = "gzip"
        self._client = httpx.Client(headers=headers, verify=_tls(settings))

    def send(self, body: bytes) -> bool:
        """Whether the collector took the batch within the timeout."""
        if self._gzip:
            body = gzip.compress(body, compresslevel=6)
        deadline = time.monotonic() + self._timeout_s
        backoff = FIRST_BACKOFF_S
        while True:
            remaining = deadline - time.monotonic()
            try:
                answer = self._client.post(self._endpoint, content=body, timeout=remaining)
            except httpx.TransportError as exc:
                failure = f"{type(exc).__name__}: {exc}"
            else:
                if answer.is_success:
                    return True
                if answer.status_code not in RETRYABLE:
                    log.warning("the OTLP collector refused decision spans: %d", answer.status_code)
                    return False
                failure = f"HTTP {answer.status_code}"
            pause = backoff * random.uniform(0.8, 1.2)
            if time.monotonic() + pause >= deadline:
                log.warning("OTLP export of decision spans failed: %s", failure)
                return False
            time.sleep(pause)
            backoff *= 2

    def close(self) -> None:
        self._client.close()


def _tls(settings: DecisionExportSettings) -> ssl.SSLContext | bool:
    """The CA file and client certificate the OTEL_EXPORTER_OTLP_* variables name."""
    if not settings.endpoint.startswith("https://"):
        return True
    context = ssl.create_default_context(cafile=settings.certificate)
    if settings.client_certificate:
        context.load_cert_chain(settings.client_certificate, settings.client_key)
    return context
