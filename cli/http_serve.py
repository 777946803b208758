"""uvicorn as every HTTP process of Tachograph runs it (serve, the OTLP receiver)."""

from __future__ import annotations

from typing import Any


def run_http(app: Any, host: str, port: int, settings: Any) -> None:
    """Serve `app` until SIGTERM or SIGINT: JSON logs, no access log of uvicorn's own
    (api/observability.py has one), deadlines for slow headers and bodies."""
    import uvicorn

    from api.read_deadlines import with_deadlines

    uvicorn.run(
        app,
        host=host,
        port=port,
        log_config=None,
        access_log=False,
        http=with_deadlines(settings.http_header_timeout_s, settings.http_body_timeout_s),
    )
