"""FastAPI application factory: the one composition root for HTTP processes."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI

from api.bootstrap import Services, build_services
from api.errors import install_error_handlers
from api.middleware import ApiKeyMiddleware, BodyLimitMiddleware
from api.routes import adapters, auditors, health, hooks, metrics, sessions, workspaces
from api.routes import log as log_routes
from api.routes import schedules, tasks
from infra.settings import Settings


def create_app(settings: Settings, services: Services | None = None) -> FastAPI:
    """Build the app; background work starts in the lifespan and stops with it."""
    services = services or build_services(settings)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        services.start()
        try:
            yield
        finally:
            services.stop()

    app = FastAPI(
        title="Tachograph",
        version="0.1.0",
        summary="Event-sourced control plane for AI coding agents.",
        lifespan=lifespan,
    )
    app.state.services = services
    install_error_handlers(app)
    for router in (
        workspaces.router,
        sessions.router,
        hooks.router,
        adapters.router,
        tasks.router,
        schedules.router,
        auditors.router,
        log_routes.router,
        health.router,
        metrics.router,
    ):
        app.include_router(router)
    app.add_middleware(ApiKeyMiddleware, api_key=settings.api_key)
    app.add_middleware(BodyLimitMiddleware)
    return app
