"""The ASGI application: ``app.main:app``, built from the environment."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from functools import partial

from fastapi import FastAPI
from fastapi.routing import APIRoute
from sqlalchemy.orm import Session, sessionmaker

from app import generation
from app.api import (
    clusters,
    default_group,
    health,
    namespaces,
    quota,
    request_quotas,
    resourcegroups,
    tenants,
    ui,
)
from app.api import metrics as metrics_api
from app.api.authentication import TokenAuthMiddleware
from app.api.draft_aliases import draft_alias_router
from app.api.errors import register_error_handlers
from app.api.limits import RequestLimits, RequestLimitsMiddleware
from app.api.spec import document_security
from app.api.throttling import ThrottlingMiddleware
from app.auth import TokenVerifier
from app.config import Settings, get_settings
from app.db import make_engine, make_sessionmaker
from app.metrics import Metrics
from app.quota import history, reporters
from app.quota.cache import ReportCache
from app.quota.changes import ChangeWatch, Reading
from app.quota.lanes import ReportLanes
from app.quota.leases import keep_alive_s
from app.quota.repository import UsageRepository
from app.quota.tokens import new_token
from app.quota.tuning import STALE_REPORT_INTERVALS
from app.readcache import group_cache_for
from app.request_quotas import RequestThrottle
from app.state import AppState, attach, state_of

DESCRIPTION = (
    "Apache Pulsar's ResourceGroup admin API (PIP-82) for Spark jobs: groups of rate quotas "
    'attached to tenants and namespaces. Errors are Pulsar\'s `{"reason": "..."}` bodies. '
    "Authenticate with a Pulsar-format token: `Authorization: Bearer <jwt>`."
)


# Objects allocated before the collector looks at the young ones: a report of thousands of
# namespaces parses into some 70,000 objects that live as long as the request. At Python's
# default (700) each report set off about a hundred collections, which moved them into the
# old generation, whose full collections then walked everything the server keeps; at this
# threshold it sets off one or two. (200,000 measured no better at PIP-82's broker scale.)
GC_YOUNG_THRESHOLD = 50_000


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    """Sample usage while the server runs; close the app's state when it stops.

    The state itself is built with the app, not here: the middlewares take parts of it when
    they are added, before any lifespan, and a test's ``TestClient(app)`` serves requests
    without running one.
    """
    # What exists once the server has started lives as long as the process: frozen, no
    # collection walks it again.
    gc.freeze()
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(GC_YOUNG_THRESHOLD, older, oldest)
    state = state_of(app)
    tasks = [
        asyncio.create_task(
            history.sample_periodically(
                state.sessions, state.clock, state.settings, state.metrics.history_samples.observe
            )
        ),
        asyncio.create_task(quota.keep_up(state)),
    ]
    try:
        yield
    finally:
        for task in tasks:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await state.close()


def build_state(settings: Settings, clock: Callable[[], float]) -> AppState:
    engine = make_engine(settings.database_url)
    sessions = make_sessionmaker(engine)
    counter = history.counter_for(settings)
    metrics = Metrics(
        keep_alive_s(settings.report_interval_seconds, settings.report_lease_seconds), counter
    )
    throttle = RequestThrottle()
    metrics.watch_request_rates(throttle.rates)
    return AppState(
        settings=settings,
        clock=clock,
        engine=engine,
        sessions=sessions,
        group_cache=group_cache_for(engine),
        report_cache=ReportCache(max_namespaces=settings.report_cache_namespaces),
        report_lanes=ReportLanes(
            sessions,
            max_wait_s=STALE_REPORT_INTERVALS * settings.report_interval_seconds,
            interval_s=settings.report_interval_seconds,
            silent_s=keep_alive_s(settings.report_interval_seconds, settings.report_lease_seconds),
            keep=partial(reporters.keep, clock=clock, interval_s=settings.report_interval_seconds),
        ),
        changes=ChangeWatch(partial(_changes, sessions)),
        metrics=metrics,
        request_throttle=throttle,
        usage_counter=counter,
        writer=new_token(),
    )


def _changes(sessions: sessionmaker[Session], groups: Sequence[str]) -> Reading:
    with sessions() as session:
        wakes = UsageRepository.of(session).wakes(groups) if groups else {}
        return generation.current(session), wakes


def operation_id(route: APIRoute) -> str:
    """Stable operationIds: the endpoint's name, so clients and the committed spec never churn."""
    return route.name


def create_app(
    settings: Settings | None = None, *, clock: Callable[[], float] = time.time
) -> FastAPI:
    """The application; ``clock`` (seconds since the epoch) is injectable for tests."""
    settings = settings or get_settings()
    app = FastAPI(
        title="ResourceGroups for Spark",
        version="0.1.0",
        description=DESCRIPTION,
        generate_unique_id_function=operation_id,
        lifespan=lifespan,
        # Served by `ui.router` from this package's files: no CDN, so they work offline.
        docs_url=None,
        redoc_url=None,
    )
    state = build_state(settings, clock)
    attach(app, state)
    # Innermost: inside authentication, to refuse a role's body before reading it, and inside
    # throttling, whose metrics then count its 413s and 415s.
    app.add_middleware(
        RequestLimitsMiddleware,
        limits=RequestLimits.from_settings(settings, [quota.report_usage.__name__]),
        routes=lambda: state.routes,
    )
    # Added early, so it runs inside authentication and sees the caller's role.
    app.add_middleware(
        ThrottlingMiddleware,
        throttle=state.request_throttle,
        metrics=state.metrics,
        sessions=state.sessions,
    )
    app.add_middleware(
        TokenAuthMiddleware,
        verifier=TokenVerifier.from_settings(settings) if settings.auth_enabled else None,
        superusers=settings.superusers,
        protected_paths=metrics_api.protected_paths(settings),
    )
    register_error_handlers(app)
    canonical = (resourcegroups.router, tenants.router, namespaces.router)
    # Matched in this order, on every request: the workers' reports (by far the most
    # requests) first, where they are told apart in 3 microseconds rather than 40.
    routers = (
        quota.router,
        *canonical,
        default_group.router,
        clusters.router,
        request_quotas.router,
        health.router,
        metrics_api.router,
        ui.router,
        draft_alias_router(*canonical),
    )
    for router in routers:
        app.include_router(router)
    # Flat: newer FastAPI keeps an included router as one route.
    state.routes = [route for router in routers for route in router.routes]
    app.openapi = document_security(app, quota.SCHEMAS)  # type: ignore[method-assign]
    return app


def __getattr__(name: str) -> FastAPI:
    # `app` is built on first access, not at import, so that importing this module (tests,
    # the spec generator) does not need a configured key or database.
    if name == "app":
        globals()["app"] = built = create_app()
        return built
    raise AttributeError(name)
