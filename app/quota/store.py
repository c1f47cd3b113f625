"""Usage reports in the SQL store, so that every server process sees every reporter.

One report is a handful of statements whatever its size: resolve the namespaces' effective
groups together with the reporter's stored rows, mark the reporter alive, read the fresh
figures of every other reporter in those groups, run the allocator per group and dimension,
and write back only the rows that changed.

A report may carry thousands of namespaces (PIP-82's brokers each serve 5,000, each shared
with 4 other brokers), so nothing here costs more than a few microseconds per namespace
and member row: Core selects of just the columns needed (no ORM objects), keys passed to
PostgreSQL as two arrays rather than thousands of parameters, members grouped by group
once, dimensions a group does not limit skipped, one executemany upsert for the rows due.
"""

from __future__ import annotations

import functools
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import (
    BindParameter,
    ColumnElement,
    Connection,
    String,
    and_,
    any_,
    bindparam,
    delete,
    func,
    not_,
    select,
    tuple_,
    union_all,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from app.access import Principal
from app.errors import Forbidden, NotFound
from app.metrics import GroupTotals
from app.models import (
    DIMENSIONS,
    RATE_COLUMNS,
    Namespace,
    NamespacePermission,
    QuotaReporter,
    QuotaUsage,
    ResourceGroup,
    Tenant,
)
from app.quota.allocator import UNKNOWN, Grant, Report, plan
from app.quota.schemas import (
    DIMENSION_NAMES,
    UNLIMITED,
    NamespaceAllocation,
    NamespaceUsage,
    ReportResult,
    UsageReport,
)
from app.schemas import ResourceGroupRead

# The group's configured rate that each dimension is held to.
RATE_COLUMN = {
    "publish_msgs": "publish_rate_in_msgs",
    "publish_bytes": "publish_rate_in_bytes",
    "dispatch_msgs": "dispatch_rate_in_msgs",
    "dispatch_bytes": "dispatch_rate_in_bytes",
}
JSON_NAME = dict(zip(DIMENSIONS, DIMENSION_NAMES, strict=True))

STALE_REPORT_INTERVALS = 2  # a report older than this on arrival is not stored
SILENT_INTERVALS = 3  # a reporter not heard from for this long is gone
REFRESH_INTERVALS = 5  # a row is rewritten at least this often, even if nothing moved
SIGNIFICANT_CHANGE = 0.05  # smaller moves in usage or demand need not be rewritten
ALLOCATION_CHANGE = 0.001  # allocations are written on any real change: see `_due`
PURGE_INTERVALS = 10  # rows older than this are deleted
REPORTING_ACTIONS = frozenset({"produce", "consume"})

NamespaceKey = tuple[str, str]

#: One reporter's figures for one namespace, flat, in the order of these ``quota_usage``
#: columns: usage, demand and allocation of each dimension in turn. Tuples rather than
#: objects, because a report handles tens of thousands of them.
FIGURE_COLUMNS = tuple(
    f"{dim}_{part}" for dim in DIMENSIONS for part in ("usage", "demand", "allocation")
)
Figures = tuple[Any, ...]
USAGE, DEMAND, ALLOCATION = 0, 1, 2
_FIGURES = [getattr(QuotaUsage, column) for column in FIGURE_COLUMNS]
_RATES = [getattr(ResourceGroup, column) for column in RATE_COLUMNS]
_QUOTA_INDEX = [RATE_COLUMNS.index(RATE_COLUMN[dim]) for dim in DIMENSIONS]


@dataclass(frozen=True, slots=True)
class Effective:
    """A namespace's effective group, its configured rates, and what they hold each dimension to."""

    group: str | None
    limits: ResourceGroupRead | None
    quotas: tuple[float | None, ...] = (None,) * len(DIMENSIONS)
    """Per dimension, in `DIMENSIONS` order: the rate, or None when unlimited (-1 or 0)."""
    limited: bool = False
    """Whether any dimension is limited."""

    def quota(self, dim: str) -> float | None:
        """The group's rate for a dimension, or None when it is unlimited (-1 or 0)."""
        return self.quotas[DIMENSIONS.index(dim)]


_NO_GROUP = Effective(None, None)


_LIMIT_FIELDS = tuple(ResourceGroupRead.model_fields)


class _Groups:
    """`Effective` values from query rows, one per group: namespaces share them, and groups
    with the same rates share their limits."""

    def __init__(self) -> None:
        self.seen: dict[str, Effective] = {}
        self.limits: dict[tuple[int, ...], tuple[ResourceGroupRead, tuple[float | None, ...]]] = {}

    def of(self, group: str | None, rates: Sequence[Any]) -> Effective:
        if group is None:
            return _NO_GROUP
        effective = self.seen.get(group)
        if effective is None:
            effective = self.seen[group] = self._effective(group, tuple(rates))
        return effective

    def _effective(self, group: str, rates: tuple[Any, ...]) -> Effective:
        if rates[0] is None:  # the attachment names a group that is not there
            return Effective(group, None)
        known = self.limits.get(rates)
        if known is None:
            # Straight from the database's integer columns: nothing to validate.
            limits = ResourceGroupRead.model_construct(
                **dict(zip(_LIMIT_FIELDS, rates, strict=True))
            )
            quotas = tuple(
                float(rate) if (rate := rates[index]) > 0 else None for index in _QUOTA_INDEX
            )
            known = self.limits[rates] = (limits, quotas)
        limits, quotas = known
        return Effective(group, limits, quotas, any(quota is not None for quota in quotas))


def parse_namespace(ref: str) -> NamespaceKey:
    tenant, _, namespace = ref.partition("/")
    return tenant, namespace


class _Sql:
    """The statements of a report, built once per dialect with named parameters.

    Built once, a statement is also compiled once (SQLAlchemy caches the compiled form by
    its structure), which matters to the many small reports of Spark workers: building
    and compiling them afresh cost more than running them. On PostgreSQL a set of keys is
    two array parameters however many there are; SQLite gets one parameter per value.
    """

    def __init__(self, dialect: str) -> None:
        self.postgresql = dialect == "postgresql"
        reporter: BindParameter[str] = bindparam("reporter_id")
        group = func.coalesce(Namespace.resource_group, Tenant.resource_group)
        namespaces = select(Namespace.tenant, Namespace.name, group, *_RATES)
        if self.postgresql:
            # Joined from the keys rather than filtered by them: PostgreSQL then looks each
            # namespace and group up by its key, where a filter had it merge-join every group.
            keys = self._pairs()
            namespaces = namespaces.select_from(keys).join(
                Namespace, (Namespace.tenant == keys.c.tenant) & (Namespace.name == keys.c.name)
            )
        else:
            namespaces = namespaces.where(self._keys_in(Namespace.tenant, Namespace.name))
        namespaces = namespaces.join(Tenant, Tenant.name == Namespace.tenant).outerjoin(
            ResourceGroup, ResourceGroup.name == group
        )
        #: (tenant, name, effective group, its six rates)
        self.namespaces = namespaces
        stored = select(func.count()).where(QuotaUsage.reporter_id == reporter)
        #: The same, then how many rows the reporter has in all, then its stored row.
        self.own = namespaces.add_columns(
            stored.scalar_subquery(), QuotaUsage.written_at, *_FIGURES
        ).outerjoin(
            QuotaUsage,
            and_(
                QuotaUsage.reporter_id == reporter,
                QuotaUsage.tenant == Namespace.tenant,
                QuotaUsage.namespace == Namespace.name,
            ),
        )
        self.owner = select(QuotaReporter.role).where(QuotaReporter.reporter_id == reporter)
        reporters = self._insert(QuotaReporter.__table__)
        # The owner comes back: the role that first used the id, or this one if it is new.
        self.claim = (
            reporters.values(
                reporter_id=reporter, role=bindparam("role"), last_seen_at=bindparam("now")
            )
            .on_conflict_do_update(
                index_elements=["reporter_id"],
                set_={"last_seen_at": reporters.excluded.last_seen_at},
            )
            .returning(QuotaReporter.role)
        )
        # A namespace is in a group by its own attachment, or by its tenant's when it has
        # none; as two selects each can use its index, which the COALESCE of both could not.
        attached = select(
            Namespace.tenant, Namespace.name, Namespace.resource_group.label("grp")
        ).where(self._among(Namespace.resource_group, "groups"))
        inherited = (
            select(Namespace.tenant, Namespace.name, Tenant.resource_group.label("grp"))
            .join(Tenant, Tenant.name == Namespace.tenant)
            .where(Namespace.resource_group.is_(None))
            .where(self._among(Tenant.resource_group, "groups"))
        )
        members = union_all(attached, inherited).subquery()
        #: (group, reporter, tenant, namespace, *figures) of the other reporters' fresh rows
        self.peers = (
            select(
                members.c.grp,
                QuotaUsage.reporter_id,
                QuotaUsage.tenant,
                QuotaUsage.namespace,
                *_FIGURES,
            )
            .join(
                QuotaUsage,
                (QuotaUsage.tenant == members.c.tenant) & (QuotaUsage.namespace == members.c.name),
            )
            .join(QuotaReporter, QuotaReporter.reporter_id == QuotaUsage.reporter_id)
            .where(QuotaUsage.reporter_id != reporter)
            .where(QuotaReporter.last_seen_at > bindparam("alive_after"))
            .where(QuotaUsage.written_at > bindparam("fresh_after"))
        )
        # The table, not the mapped class: a Core executemany, without the ORM's bulk work.
        usage = self._insert(QuotaUsage.__table__)
        self.upsert = usage.on_conflict_do_update(
            index_elements=["reporter_id", "tenant", "namespace"],
            set_={column: usage.excluded[column] for column in ("written_at", *FIGURE_COLUMNS)},
        )
        self.drop_others = (
            delete(QuotaUsage)
            .where(QuotaUsage.reporter_id == reporter)
            .where(not_(self._keys_in(QuotaUsage.tenant, QuotaUsage.namespace)))
        )

    def _insert(self, table: Any) -> Any:
        return postgresql.insert(table) if self.postgresql else sqlite.insert(table)

    def _among(self, column: Any, name: str) -> ColumnElement[bool]:
        if self.postgresql:
            condition: ColumnElement[bool] = column == any_(
                bindparam(name, type_=postgresql.ARRAY(String))
            )
            return condition
        return column.in_(bindparam(name, expanding=True))  # type: ignore[no-any-return]

    def _pairs(self) -> Any:
        """On PostgreSQL, the keys as a table of (tenant, name)."""
        return (
            func.unnest(
                bindparam("tenants", type_=postgresql.ARRAY(String)),
                bindparam("names", type_=postgresql.ARRAY(String)),
            )
            .table_valued("tenant", "name")
            .render_derived()
        )

    def _keys_in(self, tenant: Any, name: Any) -> ColumnElement[bool]:
        if self.postgresql:
            pairs = self._pairs()
            return tuple_(tenant, name).in_(select(pairs.c.tenant, pairs.c.name))
        return tuple_(tenant, name).in_(bindparam("keys", expanding=True))

    def keys(self, keys: Sequence[NamespaceKey]) -> dict[str, Any]:
        """The parameters that `_keys_in` takes."""
        if self.postgresql:
            return {"tenants": [key[0] for key in keys], "names": [key[1] for key in keys]}
        return {"keys": list(keys)}

    def groups(self, groups: Sequence[str]) -> dict[str, Any]:
        return {"groups": list(groups)}


@functools.cache
def _statements(dialect: str) -> _Sql:
    return _Sql(dialect)


def _sql(session: Session) -> tuple[Connection, _Sql]:
    """The session's connection (plain rows, not the ORM's result machinery) and statements."""
    connection = session.connection()
    return connection, _statements(connection.dialect.name)


def _missing(keys: Iterable[NamespaceKey], found: dict[NamespaceKey, Any]) -> None:
    for key in keys:
        if key not in found:
            raise NotFound(f"Namespace does not exist: {key[0]}/{key[1]}")


def effective_groups(
    session: Session, keys: Iterable[NamespaceKey]
) -> dict[NamespaceKey, Effective]:
    """Each namespace's effective group and its limits; NotFound names a missing namespace."""
    keys = list(keys)
    connection, sql = _sql(session)
    groups = _Groups()
    found = {
        (row[0], row[1]): groups.of(row[2], row[3:])
        for row in connection.execute(sql.namespaces, sql.keys(keys))
    }
    _missing(keys, found)
    return found


def authorize_reporting(
    session: Session, principal: Principal, keys: Iterable[NamespaceKey]
) -> None:
    """Namespace clients report only for namespaces they may produce to or consume from."""
    if principal.is_superuser:
        return
    keys = set(keys)
    granted = session.execute(
        select(
            NamespacePermission.tenant, NamespacePermission.namespace, NamespacePermission.actions
        )
        .where(NamespacePermission.role == principal.role)
        .where(tuple_(NamespacePermission.tenant, NamespacePermission.namespace).in_(keys))
    )
    allowed = {(t, ns) for t, ns, actions in granted if REPORTING_ACTIONS & set(actions)}
    tenants = {tenant for tenant, _ in keys - allowed}
    if tenants:
        admin_of = {
            name
            for name, roles in session.execute(
                select(Tenant.name, Tenant.admin_roles).where(Tenant.name.in_(tenants))
            )
            if principal.role in roles
        }
        allowed |= {key for key in keys if key[0] in admin_of}
    denied = sorted(keys - allowed)
    if denied:
        tenant, namespace = denied[0]
        raise Forbidden(
            f"Role {principal.role} may not report for namespace {tenant}/{namespace}: "
            "it needs the produce or consume permission"
        )


def claim_reporter(
    session: Session, principal: Principal, reporter_id: str, now: datetime, *, alive: bool
) -> None:
    """The reporter belongs to the role that first reported with it; mark it alive."""
    connection, sql = _sql(session)
    if alive:
        # One statement: marked alive, and the owner returned. Refused, the transaction
        # rolls back, and the mark with it.
        owner = connection.execute(
            sql.claim, {"reporter_id": reporter_id, "role": principal.role, "now": now}
        ).scalar_one()
    else:
        owner = connection.execute(sql.owner, {"reporter_id": reporter_id}).scalar()
    if owner is not None and owner != principal.role and not principal.is_superuser:
        raise Forbidden(f"Reporter {reporter_id} belongs to another role")


@dataclass(slots=True)
class _Own:
    """One namespace of the report being handled."""

    ref: str
    effective: Effective
    figures: Figures
    """As reported, with the allocations in force (the stored ones) in place."""
    stored: Figures | None
    written_at: datetime | None


def submit(
    session: Session,
    *,
    principal: Principal,
    reporter_id: str,
    report: UsageReport,
    now: float,
    interval_s: float,
    observe: Observer | None = None,
) -> ReportResult:
    """Store a report (unless it is too old) and answer with the reporter's allocations.

    `observe` receives each limited group's totals as this report saw them (for metrics).
    """
    refs = {parse_namespace(ref): ref for ref in report.namespaces}
    keys = list(refs)
    covered_s = report.intervalMs / 1000
    connection, sql = _sql(session)
    if sql.postgresql:
        # Usage rows are soft state, rewritten every few intervals and stale after three:
        # a crash may lose the last moments of them, so a report need not wait for its
        # commit to reach the disk, which costs a Spark worker's report more than its work.
        connection.exec_driver_sql("SET LOCAL synchronous_commit TO OFF")
    groups = _Groups()
    own: dict[NamespaceKey, _Own] = {}
    # None: not known, as there were no namespaces to ask with.
    rows_stored: int | None = None
    for row in connection.execute(sql.own, {"reporter_id": reporter_id, **sql.keys(keys)}):
        key = (row[0], row[1])
        rows_stored = row[9]
        stored = None if row[10] is None else tuple(row[11:])
        ref = refs[key]
        own[key] = _Own(
            ref=ref,
            effective=groups.of(row[2], row[3:9]),
            figures=_reported(report.namespaces[ref], covered_s, stored),
            stored=stored,
            written_at=row[10],
        )
    _missing(keys, own)
    authorize_reporting(session, principal, keys)
    accepted = now - report.sentAtMs / 1000 <= STALE_REPORT_INTERVALS * interval_s
    moment = datetime.fromtimestamp(now, UTC)
    claim_reporter(session, principal, reporter_id, moment, alive=accepted)

    grants = _allocate(session, own, reporter_id, moment, interval_s, observe)
    if accepted:
        _write(session, reporter_id, own, rows_stored, grants, moment, interval_s)
    # A reporter still settling into its share reports again sooner than the interval.
    next_report_s = min(
        (
            grant.report_after(interval_s)
            for dims in grants.values()
            for grant in dims
            if grant is not None
        ),
        default=interval_s,
    )
    # Built without validation: every value is already a float, an int or a stored group.
    answer = NamespaceAllocation.model_construct
    return ReportResult.model_construct(
        accepted=accepted,
        reportIntervalMs=max(1, round(next_report_s * 1000)),
        namespaces={
            entry.ref: answer(
                resourceGroup=entry.effective.group,
                limits=entry.effective.limits,
                allocations={
                    name: UNLIMITED if grant is None else grant.rate
                    for name, grant in zip(DIMENSION_NAMES, grants[key], strict=True)
                },
            )
            for key, entry in own.items()
        },
    )


def _reported(usage: NamespaceUsage, covered_s: float, stored: Figures | None) -> Figures:
    """A namespace's figures as reported, per second, with the stored allocations."""
    figures: list[float | None] = []
    # In DIMENSION_NAMES order.
    dims = (
        usage.get("publishMsgs"),
        usage.get("publishBytes"),
        usage.get("dispatchMsgs"),
        usage.get("dispatchBytes"),
    )
    for index, reported in enumerate(dims):
        if reported is None:
            figures += (0.0, 0.0)
        else:
            figures += (reported["used"] / covered_s, reported["demand"])
        figures.append(None if stored is None else stored[3 * index + ALLOCATION])
    return tuple(figures)


def unit_id(reporter_id: str, key: NamespaceKey) -> str:
    """What one allocation is for: one reporter's limiters for one namespace."""
    return f"{reporter_id}@{key[0]}/{key[1]}"


def _allocate(
    session: Session,
    own: dict[NamespaceKey, _Own],
    reporter_id: str,
    now: datetime,
    interval_s: float,
    observe: Observer | None,
) -> dict[NamespaceKey, list[Grant | None]]:
    """The reporter's grant per namespace and dimension; None where its group sets no limit."""
    granted: dict[NamespaceKey, list[Grant | None]] = {key: [None] * len(DIMENSIONS) for key in own}
    # The reporter's own namespaces by limited group: a group is planned once, for all of them.
    mine: dict[str, list[tuple[str, _Own, list[Grant | None]]]] = defaultdict(list)
    for key, entry in own.items():
        effective = entry.effective
        if effective.group is not None and effective.limited:
            mine[effective.group].append((unit_id(reporter_id, key), entry, granted[key]))
    if not mine:
        return granted
    peers: dict[str, list[tuple[str, Figures]]] = defaultdict(list)
    connection, sql = _sql(session)
    parameters = {
        "reporter_id": reporter_id,
        "alive_after": now - timedelta(seconds=SILENT_INTERVALS * interval_s),
        "fresh_after": now - timedelta(seconds=(REFRESH_INTERVALS + 1) * interval_s),
        **sql.groups(list(mine)),
    }
    for row in connection.execute(sql.peers, parameters):
        peers[row[0]].append((f"{row[1]}@{row[2]}/{row[3]}", row[4:]))
    for group, units in mine.items():
        quotas = units[0][1].effective.quotas
        members = peers.get(group, [])
        for index, quota in enumerate(quotas):
            if quota is None:
                continue
            usage, demand, allocation = 3 * index, 3 * index + 1, 3 * index + 2
            reports = [Report(unit, f[usage], f[demand], f[allocation]) for unit, f in members]
            reports += [
                Report(unit, e.figures[usage], e.figures[demand], e.figures[allocation])
                for unit, e, _ in units
            ]
            shares = plan(quota, reports)
            for unit, _, grants in units:
                grants[index] = shares[unit]
        if observe is not None:
            observe(group, *_totals(quotas, members, units))
    return granted


Observer = Callable[[str, int, list[GroupTotals]], None]


def _totals(
    quotas: Sequence[float | None],
    members: list[tuple[str, Figures]],
    units: list[tuple[str, _Own, list[Grant | None]]],
) -> tuple[int, list[GroupTotals]]:
    """A group's reporters, and per dimension its limit and the sums of usage, demand (where
    known) and allocations in force (this report's new grants included)."""
    # Column by column (a report sums this for each of up to thousands of groups): the
    # members' figures first, then the reporter's own, as the allocator saw them.
    columns = list(zip(*[f for _, f in members], *[e.figures for _, e, _ in units], strict=True))
    others = list(zip(*[f for _, f in members], strict=True))
    reporters = {unit.partition("@")[0] for unit, _ in members}
    if units:  # all the reporter's own
        reporters.add(units[0][0].partition("@")[0])
    totals: list[GroupTotals] = []
    for index, (name, quota) in enumerate(zip(DIMENSION_NAMES, quotas, strict=True)):
        usage, demand, allocation = 3 * index, 3 * index + 1, 3 * index + 2
        if quota is None:
            in_force = -1.0
        else:
            in_force = sum(filter(None, others[allocation]), 0.0) if others else 0.0
            in_force += sum(grant.rate for _, _, g in units if (grant := g[index]) is not None)
        totals.append(
            (
                name,
                -1.0 if quota is None else quota,
                sum(filter(None, columns[usage]), 0.0),
                sum((d for d in columns[demand] if d and d < UNKNOWN), 0.0),
                in_force,
            )
        )
    return len(reporters), totals


def _write(
    session: Session,
    reporter_id: str,
    own: dict[NamespaceKey, _Own],
    rows_stored: int | None,
    granted: dict[NamespaceKey, list[Grant | None]],
    now: datetime,
    interval_s: float,
) -> None:
    """Write the rows that moved (or are due a refresh); drop namespaces no longer reported."""
    connection, sql = _sql(session)
    refresh_by = now - timedelta(seconds=(REFRESH_INTERVALS - 1) * interval_s)
    rows = []
    for key, entry in own.items():
        figures = list(entry.figures)
        for index, grant in enumerate(granted[key]):
            figures[3 * index + ALLOCATION] = None if grant is None else grant.rate
        if entry.stored is None or _due(entry, tuple(figures), refresh_by):
            row = dict(zip(FIGURE_COLUMNS, figures, strict=True))
            row.update(reporter_id=reporter_id, tenant=key[0], namespace=key[1], written_at=now)
            rows.append(row)
    if rows:
        connection.execute(sql.upsert, rows)
    # Rows of namespaces this reporter no longer reports: rarely any, so first counted.
    still_reported = sum(1 for entry in own.values() if entry.stored is not None)
    if rows_stored is None or rows_stored > still_reported:
        connection.execute(sql.drop_others, {"reporter_id": reporter_id, **sql.keys(list(own))})


def _due(entry: _Own, new: Figures, refresh_by: datetime) -> bool:
    """Whether a row must be rewritten: it is due a refresh, or a figure moved noticeably.

    Allocations are what other reporters' headroom is computed from, so any real change to
    them is written; usage and demand may drift by less than 5% unrecorded, for at most
    ``REFRESH_INTERVALS`` intervals.
    """
    old = entry.stored
    assert old is not None and entry.written_at is not None
    if _aware(entry.written_at) <= refresh_by:
        return True
    for index in range(0, len(FIGURE_COLUMNS), 3):
        if _moved(old[index + USAGE], new[index + USAGE], SIGNIFICANT_CHANGE):
            return True
        if _moved(old[index + DEMAND], new[index + DEMAND], SIGNIFICANT_CHANGE):
            return True
        before, after = old[index + ALLOCATION], new[index + ALLOCATION]
        if (before is None) != (after is None):
            return True
        if before is not None and after is not None and _moved(before, after, ALLOCATION_CHANGE):
            return True
    return False


def _moved(before: float, after: float, tolerance: float) -> bool:
    return abs(after - before) > tolerance * max(abs(before), abs(after), 1.0)


def _aware(moment: datetime) -> datetime:
    # SQLite hands timestamps back without their (UTC) zone.
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def limits_of(effective: Effective) -> ResourceGroupRead | None:
    return effective.limits


def release(session: Session, principal: Principal, reporter_id: str) -> None:
    """Free a reporter's shares at once (PIP-82's "report 0"), as rgspark does at exit."""
    owner = session.scalar(
        select(QuotaReporter.role).where(QuotaReporter.reporter_id == reporter_id)
    )
    if owner is None:
        raise NotFound("Reporter does not exist")
    if owner != principal.role and not principal.is_superuser:
        raise Forbidden(f"Reporter {reporter_id} belongs to another role")
    session.execute(delete(QuotaReporter).where(QuotaReporter.reporter_id == reporter_id))


def purge(session: Session, now: datetime, interval_s: float) -> None:
    """Delete reporters and rows long gone, so the tables do not grow without bound."""
    horizon = now - timedelta(seconds=PURGE_INTERVALS * interval_s)
    session.execute(delete(QuotaReporter).where(QuotaReporter.last_seen_at < horizon))
    session.execute(delete(QuotaUsage).where(QuotaUsage.written_at < horizon))
