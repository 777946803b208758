"""FastAPI application factory: the one composition root for HTTP processes."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

from fastapi import Depends, FastAPI
from fastapi_offline import FastAPIOffline

from api.auth import AuthMiddleware
from api.deps import Collaborators
from api.errors import install_error_handlers
from api.framework import framework_options
from api.hook_routes import finish_background_dispatches, install_hook_routes
from api.input_limits import QueryGuardMiddleware
from api.middleware import BodyLimitMiddleware
from api.observability import ObservabilityMiddleware, bind_path_ids
from api.openapi import install_openapi
from api.otlp_routes import install_otlp_routes
from api.routes import (
    activity,
    approvals,
    auditors,
    autonomy_pipeline,
    autonomy_settings,
    health,
    hooks,
    keys,
    learned,
    metrics,
    policy,
    receiver_status,
    schedules,
    self_update,
    self_update_workflow,
    sessions,
    signals,
    stream,
    tasks,
    usage,
    web,
    workspaces,
)
from api.routes import log as log_routes
from bootstrap import Services, build_services, freeze_startup_heap
from infra.settings import Settings
from services.process_metrics import ProcessMetrics


def create_app(
    settings: Settings,
    services: Services | None = None,
    *,
    long_lived: bool = False,
    on_started: Callable[[Services], None] | None = None,
) -> FastAPI:
    """Build the app; background work starts in the lifespan and stops with it.

    `long_lived`: the app is this process's whole life (`tachograph serve`), so what
    start-up built is frozen out of garbage collection (see freeze_startup_heap).
    `on_started` runs once the services' threads are up (serve places them on CPUs).
    """
    services = services or build_services(settings)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        services.start()
        if on_started is not None:
            on_started(services)
        if long_lived:
            freeze_startup_heap()
        try:
            yield
        finally:
            # Coder dispatches answered at their deadline still finish and record first.
            await finish_background_dispatches()
            services.stop()

    app = FastAPIOffline(
        title="Tachograph",
        version="0.1.0",
        summary="Event-sourced control plane for AI coding agents.",
        lifespan=lifespan,
        dependencies=[Depends(bind_path_ids)],
        **framework_options(),
    )
    app.state.collaborators = collaborators_of(services)
    # For tests and tools holding an app; no route reads it.
    app.state.services = services
    app.state.metrics = ProcessMetrics(services)
    install_error_handlers(app)
    install_openapi(app, api_key=settings.api_key is not None)
    for router in (
        workspaces.router,
        sessions.router,
        hooks.router,
        tasks.router,
        schedules.router,
        auditors.router,
        log_routes.router,
        health.router,
        metrics.router,
        web.router,
        autonomy_settings.router,
        signals.router,
        learned.router,
        self_update.router,
        keys.router,
        self_update_workflow.router,
        activity.router,
        stream.router,
        approvals.router,
        autonomy_pipeline.router,
        policy.router,
        usage.router,
    ):
        app.include_router(router)
    # Both ahead of the FastAPI routes; the hook routes, the hottest, first of all.
    install_otlp_routes(app)
    install_hook_routes(app)
    install_middleware(app, services, settings)
    return app


def create_receiver_app(settings: Settings, services: Services | None = None) -> FastAPI:
    """The OTLP receiver alone, for the process `serve` starts with TACHOGRAPH_OTLP_PORT
    (cli/otlp_receiver.py): the same routes, credentials, body caps and error answers
    as on the main port, and the shared log; no projections, jobs or other routes, so
    exports cost the hooks' process nothing but reading what they appended."""
    services = services or build_services(settings)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        services.start_receiving()
        try:
            yield
        finally:
            services.stop_receiving()

    app = FastAPI(lifespan=lifespan, **framework_options())
    app.state.collaborators = collaborators_of(services)
    app.state.services = services
    install_error_handlers(app)
    app.include_router(receiver_status.router)
    install_otlp_routes(app)
    install_middleware(app, services, settings)
    return app


def install_middleware(app: FastAPI, services: Services, settings: Settings) -> None:
    """Every request's path through the checks, outermost last: the body is read only
    once the credential in the headers was accepted."""
    app.add_middleware(BodyLimitMiddleware)
    app.add_middleware(AuthMiddleware, fastapi_app=app, credentials=services.credentials)
    app.add_middleware(QueryGuardMiddleware)
    app.add_middleware(ObservabilityMiddleware, fastapi_app=app, access_log=settings.access_log)


def collaborators_of(services: Services) -> Collaborators:
    """What the routes may use, each on its own: never the composition root itself."""
    # Optional in Services for its field order only: build_services wires all three.
    assert services.tasks is not None
    assert services.autonomy is not None
    assert services.learned is not None
    assert services.policies is not None
    assert services.usage is not None
    assert services.usage_figures is not None
    return Collaborators(
        settings=services.settings,
        app=services.app,
        store=services.store,
        runner=services.runner,
        ingest=services.ingest,
        scheduler=services.scheduler,
        credentials=services.credentials,
        keys=services.keys,
        tasks=services.tasks,
        autonomy=services.autonomy,
        learned=services.learned,
        sessions=services,
        note_key=services.note_key,
        policies=services.policies,
        usage=services.usage,
        usage_figures=services.usage_figures,
    )
