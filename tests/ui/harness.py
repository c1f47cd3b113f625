"""A server for the dashboard to show, and real rgspark workers to give it something to show.

Used by the browser tests and by ``python -m tests.ui.readme_screenshot``.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from sqlalchemy import Engine

from app.auth import create_token, generate_secret_key
from app.db import upgrade_schema
from app.state import state_of
from rgspark._admin import AdminClient
from rgspark._quota import NamespaceQuota
from rgspark._reporter import Reporter
from tests.conftest import SUPERUSER, make_settings, serve
from tests.factories import running_app

# A sample a second, so that a chart moves within the few seconds a test watches it.
RESOLUTION_S = 1.0
# Short leases, so that a moment's usage is complete (`app.quota.history.complete_after_s`)
# within those seconds too.
LEASE_S = 2.0


@dataclass
class DashboardServer:
    url: str
    secret_key: bytes
    engine: Engine

    def token(self, role: str) -> str:
        return create_token(subject=role, secret_key=self.secret_key)

    def api(self, role: str = SUPERUSER) -> httpx.Client:
        """A client of the admin API as `role`, for `tests.factories` to make things with."""
        return httpx.Client(
            base_url=self.url, headers={"Authorization": f"Bearer {self.token(role)}"}
        )


@contextmanager
def dashboard_server(directory: Path) -> Iterator[DashboardServer]:
    """A server over real HTTP on its own migrated SQLite database, sampling every second."""
    database_url = f"sqlite:///{directory / 'dashboard.db'}"
    upgrade_schema(database_url)
    secret_key = generate_secret_key()
    settings = make_settings(
        database_url,
        secret_key,
        usage_history_resolution_seconds=RESOLUTION_S,
        report_lease_seconds=LEASE_S,
    )
    with running_app(settings) as app, serve(app) as url:
        yield DashboardServer(url, secret_key, state_of(app).engine)


@dataclass
class Workload:
    """Worker processes' worth of rgspark runtimes: each a real reporter, and a producer that
    publishes through the reporter's limits and takes ``1 / rate`` seconds of work per
    message, so that unthrottled it runs at `rate` msgs/s, and throttled its demand (what
    rgspark estimates from the time it is held back) is `rate`."""

    url: str
    token: str
    _stop: threading.Event = field(default_factory=threading.Event)
    _reporters: list[Reporter] = field(default_factory=list)
    _producers: list[threading.Thread] = field(default_factory=list)

    def start(
        self,
        tenant: str,
        namespace: str,
        *,
        workers: int = 1,
        rate: float = 100.0,
        message_bytes: int = 1000,
    ) -> None:
        for _ in range(workers):
            quota = NamespaceQuota(tenant, namespace)
            reporter = Reporter(AdminClient(self.url, token=self.token), [quota])
            reporter.start()
            self._reporters.append(reporter)
            producer = threading.Thread(
                target=self._produce, args=(quota, rate, message_bytes), daemon=True
            )
            producer.start()
            self._producers.append(producer)

    def _produce(self, quota: NamespaceQuota, rate: float, message_bytes: int) -> None:
        quota.use("publish")
        batch = max(1.0, rate / 50)  # 20 ms of work
        while not self._stop.is_set():
            quota.acquire("publish", batch, batch * message_bytes)
            self._stop.wait(batch / rate)  # the work

    def close(self) -> None:
        self._stop.set()
        for reporter in self._reporters:
            reporter.close()
        for producer in self._producers:
            producer.join(timeout=5)

    def __enter__(self) -> Workload:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
