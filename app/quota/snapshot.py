"""Reading a store for `app.quota.check`: read-only, in one snapshot, beside a live server.

On PostgreSQL, one REPEATABLE READ, READ ONLY transaction: every statement sees the
database as of the first, and takes no lock a writer waits for. On SQLite, one read
transaction on a connection opened read-only (so it neither creates a missing file nor
changes the journal mode): in WAL mode it reads one snapshot while writers go on.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import quote

from sqlalchemy import Connection, Engine, create_engine, select
from sqlalchemy.engine import URL

from app.db import make_engine, sqlalchemy_url
from app.models import (
    DIMENSION_COLUMNS,
    RATE_COLUMN,
    DefaultResourceGroup,
    Namespace,
    QuotaGroup,
    QuotaReporter,
    QuotaUsage,
    ResourceGroup,
    Tenant,
)
from app.quota.check import Attachment, CountedRow, GroupInForce, Snapshot
from app.quota.levels import GroupSummary
from app.schema_version import read_state

__all__ = ["Unreadable", "read_snapshot", "reading"]

_IN_FORCE = [getattr(QuotaGroup, f"{dim}_in_force") for dim in DIMENSION_COLUMNS]
_LIMITS = [getattr(ResourceGroup, RATE_COLUMN[dim]) for dim in DIMENSION_COLUMNS]
_ALLOCATIONS = [getattr(QuotaUsage, f"{dim}_allocation") for dim in DIMENSION_COLUMNS]


class Unreadable(Exception):
    """No store to check there: no such SQLite file, or a schema that is not the one this
    code reads (never migrated, or behind)."""


@contextmanager
def reading(database_url: str) -> Iterator[Connection]:
    """A connection in one read-only snapshot of the store, with this code's schema."""
    engine = _read_only_engine(database_url)
    try:
        with engine.connect() as connection, _snapshot(connection):
            _require_schema(connection)
            yield connection
    finally:
        engine.dispose()


@contextmanager
def _snapshot(connection: Connection) -> Iterator[None]:
    """One transaction, rolled back: nothing is written."""
    if connection.dialect.name != "sqlite":
        transaction = connection.begin()
        try:
            yield
        finally:
            transaction.rollback()
        return
    # The driver begins its own transactions only before a write: begun here, every read
    # that follows shares the first one's snapshot.
    connection.exec_driver_sql("BEGIN")
    try:
        yield
    finally:
        connection.exec_driver_sql("ROLLBACK")


def _read_only_engine(database_url: str) -> Engine:
    url = sqlalchemy_url(database_url)
    if url.get_backend_name() == "sqlite":
        # Autocommit, to the driver: the transaction is `_snapshot`'s own.
        return create_engine(
            _sqlite_read_only(url), isolation_level="AUTOCOMMIT", connect_args={"timeout": 15}
        )
    return make_engine(database_url).execution_options(
        isolation_level="REPEATABLE READ", postgresql_readonly=True
    )


def _sqlite_read_only(url: URL) -> URL:
    database = url.database
    if database in (None, "", ":memory:"):
        raise Unreadable("An in-memory SQLite database holds no store to check")
    if not Path(database).is_file():
        raise Unreadable(f"No SQLite database file at {database}")
    return url.set(database=f"file:{quote(database)}", query={"mode": "ro", "uri": "true"})


def _require_schema(connection: Connection) -> None:
    state = read_state(connection)
    if not state.current or state.behind:
        raise Unreadable(state.describe())


def read_snapshot(connection: Connection, read_at: datetime) -> Snapshot:
    """What `app.quota.check` judges, read on a connection from `reading`."""
    groups = connection.execute(
        select(QuotaGroup.name, QuotaGroup.levels, *_IN_FORCE, *_LIMITS).outerjoin(
            ResourceGroup, ResourceGroup.name == QuotaGroup.name
        )
    ).all()
    size = len(DIMENSION_COLUMNS)
    counted = connection.execute(
        select(
            QuotaUsage.resource_group,
            QuotaUsage.reporter_id,
            QuotaUsage.tenant,
            QuotaUsage.namespace,
            QuotaReporter.lease_until,
            *_ALLOCATIONS,
        )
        .outerjoin(QuotaReporter, QuotaReporter.reporter_id == QuotaUsage.reporter_id)
        .where(QuotaUsage.resource_group.is_not(None))
    ).all()
    return Snapshot(
        read_at=read_at,
        groups=[
            GroupInForce(
                row[0],
                tuple(row[2 : 2 + size]),
                tuple(map(_limit, row[2 + size :])),
                _summarized(row[1]),
            )
            for row in groups
        ],
        counted=[
            CountedRow(row[0], row[1], row[2], row[3], tuple(row[5:]), _aware(row[4]))
            for row in counted
        ],
        attachments=_attachments(connection),
        group_names=frozenset(connection.scalars(select(ResourceGroup.name))),
    )


def _attachments(connection: Connection) -> list[Attachment]:
    namespaces = select(Namespace.tenant, Namespace.name, Namespace.resource_group)
    tenants = select(Tenant.name, Tenant.resource_group)
    default = select(DefaultResourceGroup.resource_group)
    return [
        *(
            Attachment("namespace", f"{tenant}/{name}", group)
            for tenant, name, group in connection.execute(namespaces)
            if group is not None
        ),
        *(
            Attachment("tenant", name, group)
            for name, group in connection.execute(tenants)
            if group is not None
        ),
        *(Attachment("default", "", group) for group in connection.scalars(default)),
    ]


def _limit(rate: int | None) -> float | None:
    """A group's rate as a limit: -1 and 0 limit nothing, as in Pulsar."""
    return float(rate) if rate is not None and rate > 0 else None


def _summarized(levels: str | None) -> tuple[float | None, ...]:
    """The limits a group's stored summary was made for."""
    if levels is None:
        return (None,) * len(DIMENSION_COLUMNS)
    return GroupSummary.from_json(levels).quotas


def _aware(moment: datetime | None) -> datetime | None:
    """SQLite gives its timestamps back without their zone, which is UTC."""
    if moment is None or moment.tzinfo is not None:
        return moment
    return moment.replace(tzinfo=UTC)
