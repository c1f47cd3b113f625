"""Request-rate quotas and request metrics, as one ASGI middleware inside authentication.

Every authenticated response carries ``X-Throttle-Time-Ms``; a role over its quota gets its
response that much later. The delay is an ``await``, so a throttled request holds no thread.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from sqlalchemy.orm import Session, sessionmaker
from starlette.concurrency import run_in_threadpool
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.access import Principal
from app.metrics import Metrics
from app.outage_log import OutageLog
from app.request_quotas import RequestQuotas, RequestThrottle
from app.services import request_quotas

logger = logging.getLogger(__name__)

THROTTLE_HEADER = b"x-throttle-time-ms"
REFRESH_S = 1.0  # how stale this process's copy of the quotas may get


class ThrottlingMiddleware:
    def __init__(
        self,
        app: ASGIApp,
        *,
        throttle: RequestThrottle,
        metrics: Metrics,
        sessions: sessionmaker[Session],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.app = app
        self.throttle = throttle
        self.metrics = metrics
        self.sessions = sessions
        self.clock = clock
        self._refreshed: asyncio.Event | None = None  # set while a reload is under way
        self._reloads = OutageLog(
            logger, "could not reload request quotas", "request quotas reloaded again"
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = self.clock()
        principal: Principal | None = scope.get("principal")
        delay = 0.0
        if principal is not None and not principal.is_superuser:
            await self._refresh_quotas()
            delay, _ = self.throttle.record(principal.role)
        if principal is not None:
            role = self.metrics.role(principal.role)
            role.requests.inc()
            if delay:
                role.throttle.inc(delay)
        status = 500

        async def send_throttled(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                if principal is not None:
                    if delay:
                        await asyncio.sleep(delay)
                    header = (THROTTLE_HEADER, str(round(delay * 1000)).encode())
                    message = {**message, "headers": [*message.get("headers", []), header]}
            await send(message)

        try:
            await self.app(scope, receive, send_throttled)
        finally:
            template = getattr(scope.get("route"), "path", "unmatched")
            self.metrics.observe_request(scope["method"], template, status, self.clock() - started)

    async def _refresh_quotas(self) -> None:
        """Reload the quotas once they are older than REFRESH_S; requests arriving during
        the reload wait for it, so that none is judged by quotas known to be stale."""
        if self._refreshed is not None:
            await self._refreshed.wait()
            return
        if not self.throttle.stale(REFRESH_S):
            return
        self._refreshed = refreshed = asyncio.Event()
        try:
            default, roles = await run_in_threadpool(self._read)
            self.throttle.update(RequestQuotas(default, roles))
            self._reloads.succeeded()
        except Exception as exc:  # the database is down: keep the quotas we have, retry later
            self._reloads.failed(exc)
            self.throttle.update(self.throttle.quotas)
        finally:
            self._refreshed = None
            refreshed.set()

    def _read(self) -> tuple[int | None, dict[str, int]]:
        with self.sessions() as session:
            return request_quotas.load(session)
