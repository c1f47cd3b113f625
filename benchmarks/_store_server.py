"""The admin server's quota path for the quota simulator: its own code, in this process.

A report is `app.quota.store.submit` in a transaction of its own, as ``POST
/quota/v1/reporters/{id}/reports`` stores a lone report (`app.api.quota`); a release is
`app.quota.reporters.release`, as ``DELETE /quota/v1/reporters/{id}``; a look for silent
reporters is `app.quota.reporters.expire` behind its read, as the server's upkeep loop
(`app.api.quota.keep_up`) runs it. All of them run on a SQLite database in memory, built by
the migrations as the test suite builds its own, in one process's `ReportCache`, at the
moment the simulation's clock says. After each, the server reads what the long poll on
changes reads (`app.quota.changes`: the admin generation and the group's wake), and says
when either moved: the simulation pushes that to the workers as the poll would.
"""

from __future__ import annotations

import sqlite3
from collections import Counter
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from functools import cache, partial
from typing import TypeVar

import httpx
from alembic import command
from sqlalchemy import Engine, create_engine
from sqlalchemy.orm import Session, sessionmaker
from sqlalchemy.pool import StaticPool

from app import generation
from app.access import Principal
from app.config import Settings
from app.db import alembic_config, begin_write, make_sessionmaker
from app.errors import AppError
from app.quota import reporters, store
from app.quota.cache import ReportCache
from app.quota.repository import UsageRepository
from app.quota.schemas import UsageReport
from app.schemas import ResourceGroupUpdate, TenantInfo
from app.services import attachments, namespaces, resourcegroups, tenants

__all__ = ["GROUP", "ROLE", "StoreServer"]

GROUP = "sim"
ROLE = "sim-job"  # the workers' role: it may produce to the namespaces, nothing more
MAX_REPORTERS = Settings.model_fields["max_reporters_per_namespace"].default

T = TypeVar("T")
Reading = tuple[int, int]
"""The admin generation and the group's wake, as the long poll reads them."""


@cache
def _migrated() -> Engine:
    """A database in memory with the schema the migrations build: made once a process (it
    takes a quarter of a second), then copied for each server (`_database`)."""
    engine = _engine_on(sqlite3.connect(":memory:", check_same_thread=False))
    with engine.begin() as migrating:
        config = alembic_config("sqlite://")
        config.attributes["connection"] = migrating  # the migrations' env.py runs on it
        command.upgrade(config, "head")
    return engine


def _database() -> Engine:
    """A fresh copy of the migrated database, in memory: a file's commit waits for its
    disk (measured: ``--all`` took 26 s on a file per run, migrated each time; 9 s so)."""
    copy = sqlite3.connect(":memory:", check_same_thread=False)
    with _migrated().connect() as template:
        migrated = template.connection.driver_connection
        assert isinstance(migrated, sqlite3.Connection)
        migrated.backup(copy)
    # As `app.db.make_engine` asks on every connection: SQLite ignores foreign keys otherwise.
    copy.execute("PRAGMA foreign_keys=ON")
    return _engine_on(copy)


def _engine_on(connection: sqlite3.Connection) -> Engine:
    # One connection, kept: a database in memory lives as long as its connection.
    return create_engine("sqlite://", creator=lambda: connection, poolclass=StaticPool)


def _rate(quota: float) -> ResourceGroupUpdate:
    """The group's publish rate, which the API takes in whole messages a second."""
    return ResourceGroupUpdate.model_validate({"publishRateInMsgs": quota})


def _world(session: Session, quota: float, spaces: Iterable[str], tenant: str) -> None:
    """What an administrator sets up for a job: the group, its tenant attached to it, and
    the namespaces, which the workers' role may produce to."""
    resourcegroups.upsert(session, GROUP, _rate(quota))
    tenants.create(session, tenant, TenantInfo())
    attachments.set_for_tenant(session, tenant, GROUP)
    for name in spaces:
        namespaces.create(session, tenant, name)
        namespaces.grant(session, tenant, name, ROLE, ["produce"])


class StoreServer:
    """The admin server's ``/quota/v1`` for one group, as an ``httpx.MockTransport``
    handler, on its own database; ``clock`` is the simulation's (seconds since the epoch).

    ``on_change`` is called with ``admin=True`` when the admin generation moved (a quota
    change) and ``admin=False`` when only the group's wake did: what the long poll on
    changes tells the workers (`rgspark`'s `Reporter.changed`).
    """

    def __init__(
        self,
        quota: float,
        interval_s: float,
        clock: Callable[[], float],
        *,
        tenant: str,
        spaces: Iterable[str],
        max_lease_s: float,
    ) -> None:
        self.clock = clock
        self.engine = _database()
        self.sessions: sessionmaker[Session] = make_sessionmaker(self.engine)
        self.cache = ReportCache()
        # What `app.api.quota.report_usage` serves reports with, for one server process
        # that counts no metrics.
        self.serving = store.Serving(
            interval_s=interval_s,
            max_lease_s=max_lease_s,
            cache=self.cache,
            max_reporters=MAX_REPORTERS,
        )
        self.principal = Principal(ROLE, is_superuser=False)
        self.received: Counter[str] = Counter()
        self.on_change: Callable[[bool], None] = lambda admin: None
        self._write(partial(_world, quota=quota, spaces=sorted(set(spaces)), tenant=tenant))
        self._seen = self._reading()

    def __call__(self, request: httpx.Request) -> httpx.Response:
        reporter = request.url.path.split("/")[4]
        try:
            if request.method == "DELETE":
                self._write(partial(self._release, reporter))
                answer = httpx.Response(204)
            else:
                self.received[reporter] += 1
                body = self._write(partial(self._submit, reporter, request.content))
                answer = httpx.Response(
                    200, content=body, headers={"content-type": "application/json"}
                )
        except AppError as error:  # as the app's handler writes it: Pulsar's body
            return httpx.Response(error.status_code, json={"reason": error.reason})
        self._look()
        return answer

    def set_quota(self, quota: float) -> None:
        """The group's publish rate changed, as ``PUT /admin/v2/resourcegroups/{name}``
        changes it."""
        update = _rate(quota)
        self._write(lambda session: resourcegroups.upsert(session, GROUP, update))
        self._look()

    def expire(self) -> None:
        """Forget the reporters silent now, as the upkeep loop does (`app.api.quota._expire`):
        a read, and a write only when some are."""
        silent_since = datetime.fromtimestamp(self.clock(), UTC)
        with self.sessions() as session:
            if not reporters.any_silent(session, silent_since):
                return
        self._write(lambda session: reporters.expire(session, silent_since, self.cache))
        self._look()

    def close(self) -> None:
        self.engine.dispose()

    def _submit(self, reporter: str, content: bytes, session: Session) -> bytes:
        # A lone report is never paced (`app.quota.lanes`), and claims its own reporter.
        report = {
            "principal": self.principal,
            "reporter_id": reporter,
            "report": UsageReport.model_validate_json(content),
            "now": self.clock(),
        }
        claim = store.claim(self.serving, **report)
        return store.submit(session, self.serving, **report, claim=claim)

    def _release(self, reporter: str, session: Session) -> None:
        now = datetime.fromtimestamp(self.clock(), UTC)
        reporters.release(session, self.principal, reporter, now, self.cache)

    def _write(self, work: Callable[[Session], T]) -> T:
        """``work`` as one transaction, as `app.transactions.transaction` runs it."""
        with self.sessions() as session:
            begin_write(session)
            result = work(session)
            session.commit()
        return result

    def _reading(self) -> Reading:
        # As `app.main` reads for `ChangeWatch`: a group without a row has wake 0.
        with self.sessions() as session:
            wakes = UsageRepository.of(session).wakes([GROUP])
            return generation.current(session), wakes.get(GROUP, 0)

    def _look(self) -> None:
        """Tell `on_change` what the long poll would see moved since it last looked."""
        reading, seen = self._reading(), self._seen
        self._seen = reading
        # As rgspark's watcher hears them: an admin change says more (report at once).
        if reading[0] != seen[0]:
            self.on_change(True)
        elif reading[1] != seen[1]:
            self.on_change(False)
