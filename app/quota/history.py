"""Each group's usage history, for people (the dashboard, ``rgadmin top``): the units counted
per moment, written once complete by the process that took the reports (`write_counts`, from
`app.quota.counts`), and every moment one process's samples of demand, allocations and
reporters, summed from the rows of the groups that may have changed; both deleted past the
retention, but for each group's latest sample. Why: docs/design.md ("Usage history and metrics").
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import (
    TIMESTAMP,
    CompoundSelect,
    Select,
    case,
    delete,
    distinct,
    exists,
    func,
    insert,
    literal,
    null,
    or_,
    select,
    text,
    union,
    update,
)
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker
from starlette.concurrency import run_in_threadpool

from app import generation as admin_generation
from app.config import Settings
from app.metrics import would_hold_back
from app.models import (
    DIMENSION_COLUMNS,
    RATE_COLUMN,
    USAGE_SAMPLING_ROW,
    Namespace,
    QuotaGroup,
    QuotaReporter,
    QuotaUsage,
    ResourceGroup,
    Tenant,
    UsageCount,
    UsageSample,
    UsageSampling,
)
from app.outage_log import OutageLog
from app.quota.counts import Bucket, UsageCounter
from app.quota.leases import keep_alive_s
from app.schemas import (
    DimensionHistory,
    GroupNamespace,
    GroupSource,
    UsageDimensions,
    UsageHistory,
)
from app.services import _sql, attachments
from rgspark.wire import DIMENSIONS, ENFORCE, RATE_FIELDS, UNKNOWN_DEMAND

__all__ = ["hold_back", "read", "sample", "sample_periodically"]

logger = logging.getLogger(__name__)

TOLERANCE_S = 1e-3
WRITE_EVERY_S = 1.0  # how often each process writes its complete counts (`app.main`)
EPOCH = datetime.fromtimestamp(0, UTC)  # when usage was last sampled, before it ever was

# The API's name of each dimension, by its column prefix: the name of the group's rate that
# holds it.
FIELD_OF = {
    column: RATE_FIELDS[name] for name, column in zip(DIMENSIONS, DIMENSION_COLUMNS, strict=True)
}


def _gone(now: datetime) -> Select[Any]:
    """The reporters whose lease (and grace) ran out by ``now``: their rows are not read.
    A NOT IN of these few names, which PostgreSQL hashes once: joined with the reporters
    instead, it planned from the tables' statistics, which a starting fleet outgrows within
    a minute, and read every live reporter's rows for every sample (0.8 s each with 40
    brokers of 5,000 namespaces)."""
    return select(QuotaReporter.reporter_id).where(QuotaReporter.lease_until <= now)


def _sums(at: datetime, groups: Any) -> Any:
    """The columns of the samples of ``groups`` (a subquery of names), reporters or not:
    the rows the allocator reads, of live reporters (a row holds its reporter's figures
    until they move, however long ago it was written: a steady or paced reporter's for
    minutes).

    One aggregate over the groups joined with their rows, rather than the groups joined
    with an aggregate of the rows: PostgreSQL estimates the groups changed since the last
    sample from statistics gathered before it (autovacuum gathers them every minute or so),
    at one row, and had the aggregate made anew for each group in a nested loop (with 40
    brokers of 5,000 namespaces a sample ran for minutes, and took several times the database
    CPU of the reports). Whatever it estimates, this reads each group's rows once: by the
    index of their group, or in one hash join."""
    rows = QuotaUsage.__table__.alias("usage")
    live = (rows.c.resource_group == ResourceGroup.name) & rows.c.reporter_id.not_in(_gone(at))
    counted = func.count(rows.c.reporter_id)
    columns: list[Any] = [
        ResourceGroup.name,
        literal(at, TIMESTAMP(timezone=True)),
        func.count(distinct(rows.c.reporter_id)),
    ]
    for dimension in DIMENSION_COLUMNS:
        demand = rows.c[f"{dimension}_demand"]
        columns += [
            getattr(ResourceGroup, RATE_COLUMN[dimension]),
            # A reporter that does not know its demand yet says so with `UNKNOWN_DEMAND`:
            # the sum is unknown too, rather than some 10^18.
            case(
                (counted == 0, 0.0),
                (func.max(demand) >= UNKNOWN_DEMAND, null()),
                else_=func.sum(demand),
            ),
            func.coalesce(func.sum(rows.c[f"{dimension}_allocation"]), 0.0),
        ]
    return (
        select(*columns)
        .outerjoin(rows, live)
        .where(ResourceGroup.name.in_(select(groups.c.name)))
        .group_by(ResourceGroup.name)
    )


_USED_COLUMNS = [f"{dimension}_used" for dimension in DIMENSION_COLUMNS]
_SAMPLE_COLUMNS = [
    "resource_group",
    "sampled_at",
    "reporters",
    *(
        f"{dimension}_{figure}"
        for dimension in DIMENSION_COLUMNS
        for figure in ("limit", "demand", "allocation")
    ),
]


def moment_of(now: float, resolution_s: float) -> datetime:
    """The sample that ``now`` (seconds since the epoch) falls in: resolution-aligned."""
    return datetime.fromtimestamp(now - now % resolution_s, UTC)


def sample(session: Session, now: float, settings: Settings) -> bool:
    """Take the sample of ``now``'s moment unless a process took it already; prune old ones.

    Whether this call took it: the process that moves `UsageSampling` forward does; any
    other waits for its row lock, then finds it moved.
    """
    at = moment_of(now, settings.usage_history_resolution_seconds)
    generation = admin_generation.current(session)
    first = {"id": USAGE_SAMPLING_ROW, "sampled_at": EPOCH, "admin_generation": generation}
    session.execute(_sql.insert(session, UsageSampling).values(first).on_conflict_do_nothing())
    last_at, last_generation = session.execute(
        select(UsageSampling.sampled_at, UsageSampling.admin_generation).with_for_update()
    ).one()
    last_at = _utc(last_at)
    if last_at >= at:
        return False
    session.execute(update(UsageSampling).values(sampled_at=at, admin_generation=generation))
    changed: Select[Any] | CompoundSelect[Any]
    if last_at == EPOCH:  # the first sample: every group
        changed = select(ResourceGroup.name)
    else:
        moved = select(QuotaGroup.name).where(QuotaGroup.changed_at > last_at)
        anew = [_configured_anew()] if generation != last_generation else []
        changed = union(moved, _lapsed(last_at, at), *anew)
    session.execute(insert(UsageSample).from_select(_SAMPLE_COLUMNS, _sums(at, changed.subquery())))
    horizon = at - timedelta(seconds=settings.usage_history_retention_seconds)
    session.execute(_prune(horizon))
    session.execute(delete(UsageCount).where(UsageCount.moment < horizon))
    # The fleet's one periodic job, so the housekeeping of the admin generation's rows too.
    admin_generation.compact(session)
    return True


def _lapsed(since: datetime, at: datetime) -> Select[Any]:
    """Groups with rows of reporters whose lease ran out since the last moment: they are
    gone at this one, whether or not a server process has forgotten them yet."""
    lapsed = select(QuotaReporter.reporter_id).where(
        QuotaReporter.lease_until > since, QuotaReporter.lease_until <= at
    )
    return (
        select(QuotaUsage.resource_group)
        .where(QuotaUsage.reporter_id.in_(lapsed), QuotaUsage.resource_group.is_not(None))
        .distinct()
    )


def _configured_anew() -> Select[Any]:
    """Groups whose configured rates differ from their latest sample's, or that have none."""
    latest = (
        select(func.max(UsageSample.sampled_at))
        .where(UsageSample.resource_group == ResourceGroup.name)
        .scalar_subquery()
    )
    sampled = UsageSample.__table__.alias("sampled")
    rates_moved = [
        sampled.c[f"{dimension}_limit"] != getattr(ResourceGroup, RATE_COLUMN[dimension])
        for dimension in DIMENSION_COLUMNS
    ]
    return (
        select(ResourceGroup.name)
        .outerjoin(
            sampled,
            (sampled.c.resource_group == ResourceGroup.name) & (sampled.c.sampled_at == latest),
        )
        .where(or_(sampled.c.resource_group.is_(None), *rates_moved))
    )


def _prune(horizon: datetime) -> Any:
    """Delete samples older than ``horizon``, but each existing group's latest (it holds)."""
    newer = UsageSample.__table__.alias("newer")
    superseded = exists().where(
        newer.c.resource_group == UsageSample.resource_group,
        newer.c.sampled_at > UsageSample.sampled_at,
    )
    gone = UsageSample.resource_group.not_in(select(ResourceGroup.name))
    return delete(UsageSample).where(UsageSample.sampled_at < horizon, superseded | gone)


def span_s(settings: Settings) -> float:
    """The longest time one report's units are spread over (`app.quota.counts`): as long as
    a reporter stays alive between two reports."""
    return keep_alive_s(settings.report_interval_seconds, settings.report_lease_seconds)


def complete_after_s(settings: Settings) -> float:
    """How long after a bucket ends every server process has written its count of it: no
    report covers it after `span_s`, and processes write what is complete every
    `WRITE_EVERY_S` (a second's leeway for the write itself)."""
    return span_s(settings) + WRITE_EVERY_S + 1.0


def counter_for(settings: Settings) -> UsageCounter:
    return UsageCounter(settings.usage_history_resolution_seconds, span_s(settings))


def write_counts(session: Session, buckets: Sequence[Bucket], writer: int) -> None:
    """Add this process's (``writer``'s) counts of the buckets to the stored ones."""
    if not buckets:
        return
    moments = [datetime.fromtimestamp(bucket.start, UTC) for bucket in buckets]
    # Each bucket is taken once it is complete, so a row is written once; a count that
    # arrives later still (a report handled across the moment) adds to it.
    if session.get_bind().dialect.name == "postgresql":
        # One statement over arrays: a broker's groups complete a bucket together, thousands
        # of rows every resolution, which as many parameter sets cost 25 us of Python each.
        columns = list(zip(*(bucket.units for bucket in buckets), strict=True))
        parameters: dict[str, Any] = {
            "groups": [bucket.group for bucket in buckets],
            "moments": moments,
            "writer": writer,
            **{name: list(values) for name, values in zip(_USED_COLUMNS, columns, strict=True)},
        }
        session.execute(_WRITE_COUNTS_ARRAYS, parameters)
        return
    rows = [
        {
            "resource_group": bucket.group,
            "moment": moment,
            "writer": writer,
            **dict(zip(_USED_COLUMNS, bucket.units, strict=True)),
        }
        for bucket, moment in zip(buckets, moments, strict=True)
    ]
    statement = _sql.insert(session, UsageCount)
    added = {
        column: getattr(UsageCount, column) + statement.excluded[column] for column in _USED_COLUMNS
    }
    session.execute(
        statement.on_conflict_do_update(
            index_elements=["resource_group", "moment", "writer"], set_=added
        ),
        rows,
    )


_WRITE_COUNTS_ARRAYS = text(
    f"INSERT INTO usage_counts (resource_group, moment, writer, {', '.join(_USED_COLUMNS)}) "
    "SELECT g, m, :writer, "
    + ", ".join(f"u{i}" for i in range(len(_USED_COLUMNS)))
    + " FROM unnest(CAST(:groups AS VARCHAR[]), CAST(:moments AS TIMESTAMPTZ[]), "
    + ", ".join(f"CAST(:{name} AS DOUBLE PRECISION[])" for name in _USED_COLUMNS)
    + ") AS v(g, m, "
    + ", ".join(f"u{i}" for i in range(len(_USED_COLUMNS)))
    + ") ON CONFLICT (resource_group, moment, writer) DO UPDATE SET "
    + ", ".join(f"{name} = usage_counts.{name} + excluded.{name}" for name in _USED_COLUMNS)
)


async def sample_periodically(
    sessions: sessionmaker[Session],
    clock: Callable[[], float],
    settings: Settings,
    observe: Callable[[float], None],
) -> None:
    """Sample at every moment of the resolution, until cancelled (the app's lifespan);
    ``observe`` learns how many seconds each of this process's samples took."""
    resolution_s = settings.usage_history_resolution_seconds
    outage = OutageLog(logger, "could not sample usage history", "usage history sampled again")
    while True:
        # Just past the moment: processes that start apart still sample the same moments.
        await asyncio.sleep(resolution_s - clock() % resolution_s + 0.05 * resolution_s)
        started = time.perf_counter()
        try:
            took = await run_in_threadpool(_sample_in_transaction, sessions, clock(), settings)
        except SQLAlchemyError as exc:
            outage.failed(exc)
        else:
            outage.succeeded()
            if took:
                observe(time.perf_counter() - started)


def _sample_in_transaction(sessions: sessionmaker[Session], now: float, settings: Settings) -> bool:
    with sessions.begin() as session:
        return sample(session, now, settings)


def read(
    session: Session, group: str, since_s: float, now: float, settings: Settings
) -> UsageHistory:
    """The group's figures at each moment of the last ``since_s`` seconds (at most the
    retention) that has been sampled, each the latest sample at or before it, with the
    usage counted over the resolution before it; and the namespaces in the group now with
    their live reporters."""
    start = now - min(since_s, settings.usage_history_retention_seconds)
    moments, series = _moments(session, group, start, settings.usage_history_resolution_seconds)
    used = _used(session, group, moments, now, settings)
    dimensions: dict[str, DimensionHistory] = {}
    for index, dimension in enumerate(DIMENSION_COLUMNS):
        limits = [max(getattr(s, f"{dimension}_limit"), 0) or -1 for s in series]
        usage = [None if units is None else units[index] for units in used]
        allocation = [
            None if limit == -1 else getattr(s, f"{dimension}_allocation")
            for s, limit in zip(series, limits, strict=True)
        ]
        dimensions[FIELD_OF[dimension]] = DimensionHistory(
            limit=limits,
            usage=usage,
            demand=[getattr(s, f"{dimension}_demand") for s in series],
            allocation=allocation,
            holdBack=[hold_back(u, a) for u, a in zip(usage, allocation, strict=True)],
        )
    return UsageHistory(
        resourceGroup=group,
        mode=session.scalar(select(ResourceGroup.mode).where(ResourceGroup.name == group))
        or ENFORCE,
        resolutionSeconds=settings.usage_history_resolution_seconds,
        times=moments,
        reporters=[s.reporters for s in series],
        dimensions=UsageDimensions(**dimensions),
        namespaces=_members(session, group, now),
    )


def hold_back(usage: float | None, allocation: float | None) -> float | None:
    """The share of ``usage`` that ``allocation`` (both units per second) does not cover
    (`app.metrics.would_hold_back`); None where either is unknown (no allocation: the
    dimension is unlimited)."""
    if usage is None or allocation is None:
        return None
    return would_hold_back(usage, allocation)


def _moments(
    session: Session, group: str, start: float, resolution_s: float
) -> tuple[list[float], list[UsageSample]]:
    """Every sampled moment from ``start`` (or the group's first sample) on, each with the
    latest sample at or before it."""
    since = datetime.fromtimestamp(start, UTC)
    last_sampled = session.scalar(select(UsageSampling.sampled_at))
    held = session.scalars(
        select(UsageSample)
        .where(UsageSample.resource_group == group, UsageSample.sampled_at <= since)
        .order_by(UsageSample.sampled_at.desc())
        .limit(1)
    ).all()
    later = session.scalars(
        select(UsageSample)
        .where(UsageSample.resource_group == group, UsageSample.sampled_at > since)
        .order_by(UsageSample.sampled_at)
    ).all()
    samples = [*held, *later]
    moments: list[float] = []
    series: list[UsageSample] = []
    if not samples or last_sampled is None:
        return moments, series
    # Stored moments are exact to the microsecond, so compared within a millisecond.
    first = max(_epoch(samples[0].sampled_at), start)
    if TOLERANCE_S < (ahead := -first % resolution_s) < resolution_s - TOLERANCE_S:
        first += ahead  # up to the next moment
    end = _epoch(last_sampled) + TOLERANCE_S
    index = 0
    while (moment := first + len(moments) * resolution_s) <= end:
        while (
            index + 1 < len(samples)
            and _epoch(samples[index + 1].sampled_at) <= moment + TOLERANCE_S
        ):
            index += 1
        moments.append(moment)
        series.append(samples[index])
    return moments, series


def _used(
    session: Session, group: str, moments: list[float], now: float, settings: Settings
) -> list[tuple[float, ...] | None]:
    """Per moment, the units per second the group's reporters used over the resolution
    before it (summed over the server processes that counted them); None while a report
    covering that time may still come (`complete_after_s`)."""
    if not moments:
        return []
    resolution_s = settings.usage_history_resolution_seconds
    rows = session.execute(
        select(UsageCount.moment, *(func.sum(getattr(UsageCount, c)) for c in _USED_COLUMNS))
        .where(
            UsageCount.resource_group == group,
            UsageCount.moment >= datetime.fromtimestamp(moments[0] - resolution_s - 1, UTC),
        )
        .group_by(UsageCount.moment)
    ).all()
    # Keyed by the bucket's index: moments are multiples of the resolution.
    counted = {round(_epoch(row[0]) / resolution_s): row[1:] for row in rows}
    complete_by = now - complete_after_s(settings)
    used: list[tuple[float, ...] | None] = []
    for moment in moments:
        if moment > complete_by + TOLERANCE_S:
            used.append(None)
            continue
        units = counted.get(round(moment / resolution_s) - 1)
        zero = (0.0,) * len(_USED_COLUMNS)
        used.append(tuple(u / resolution_s for u in units) if units is not None else zero)
    return used


def _utc(moment: datetime) -> datetime:
    # SQLite gives back the UTC moment without its zone.
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def _epoch(moment: datetime) -> float:
    return _utc(moment).timestamp()


def _members(session: Session, group: str, now: float) -> list[GroupNamespace]:
    """The namespaces whose effective group is ``group``, with where it comes from."""
    own = Namespace.resource_group
    inherited = own.is_(None) & (Tenant.resource_group == group)
    covers = (own == group) | inherited
    if attachments.get_default(session) == group:
        covers |= own.is_(None) & Tenant.resource_group.is_(None)
    rows = session.execute(
        select(Namespace.tenant, Namespace.name, own, Tenant.resource_group)
        .join(Tenant, Tenant.name == Namespace.tenant)
        .where(covers)
        .order_by(Namespace.tenant, Namespace.name)
    ).all()
    reporters = (
        select(QuotaUsage.tenant, QuotaUsage.namespace, func.count())
        .where(QuotaUsage.resource_group == group)
        .where(QuotaUsage.reporter_id.not_in(_gone(datetime.fromtimestamp(now, UTC))))
    )
    counts: dict[tuple[str, str], int] = defaultdict(int)
    counts.update(
        ((tenant, name), count)
        for tenant, name, count in session.execute(
            reporters.group_by(QuotaUsage.tenant, QuotaUsage.namespace)
        )
    )
    members = []
    for tenant, name, own_group, tenant_group in rows:
        source: GroupSource = (
            "namespace" if own_group is not None else "tenant" if tenant_group else "default"
        )
        members.append(
            GroupNamespace(
                namespace=f"{tenant}/{name}", source=source, reporters=counts[tenant, name]
            )
        )
    return members
