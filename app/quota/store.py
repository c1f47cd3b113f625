"""Usage reports in the SQL store, so that every server process sees every reporter.

One report is a handful of statements whatever its size: resolve the namespaces' effective
groups, mark the reporter alive, read the fresh figures of every reporter in those groups,
run the allocator per group and dimension, and write back only the rows that changed.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import delete, func, select, tuple_
from sqlalchemy.orm import Session

from app.access import Principal
from app.errors import Forbidden, NotFound
from app.models import (
    DIMENSIONS,
    Namespace,
    NamespacePermission,
    QuotaReporter,
    QuotaUsage,
    ResourceGroup,
    Tenant,
)
from app.quota.allocator import Grant, Report, plan
from app.quota.schemas import (
    DIMENSION_NAMES,
    UNLIMITED,
    NamespaceAllocation,
    NamespaceUsage,
    ReportResult,
    UsageReport,
)
from app.schemas import ResourceGroupRead
from app.services._sql import insert
from app.services.resourcegroups import to_read

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
PURGE_INTERVALS = 10  # rows older than this are deleted
REPORTING_ACTIONS = frozenset({"produce", "consume"})

NamespaceKey = tuple[str, str]


@dataclass(frozen=True, slots=True)
class Figures:
    """One namespace's figures from one reporter, in units per second."""

    usage: dict[str, float]
    demand: dict[str, float]
    allocation: dict[str, float | None]

    @classmethod
    def from_row(cls, row: Any) -> Figures:
        return cls(
            usage={dim: getattr(row, f"{dim}_usage") for dim in DIMENSIONS},
            demand={dim: getattr(row, f"{dim}_demand") for dim in DIMENSIONS},
            allocation={dim: getattr(row, f"{dim}_allocation") for dim in DIMENSIONS},
        )

    @classmethod
    def from_report(cls, usage: NamespaceUsage, interval_s: float) -> Figures:
        rates: dict[str, float] = {}
        demands: dict[str, float] = {}
        for dim, name in JSON_NAME.items():
            reported = getattr(usage, name)
            rates[dim] = 0.0 if reported is None else reported.used / interval_s
            demands[dim] = 0.0 if reported is None else reported.demand
        return cls(rates, demands, dict.fromkeys(DIMENSIONS))

    def with_allocation(self, allocation: dict[str, float | None] | None) -> Figures:
        return Figures(self.usage, self.demand, allocation or dict.fromkeys(DIMENSIONS))

    def columns(self) -> dict[str, float | None]:
        values: dict[str, float | None] = {}
        for dim in DIMENSIONS:
            values[f"{dim}_usage"] = self.usage[dim]
            values[f"{dim}_demand"] = self.demand[dim]
            values[f"{dim}_allocation"] = self.allocation[dim]
        return values


@dataclass(frozen=True, slots=True)
class Effective:
    group: str | None
    limits: ResourceGroup | None

    def quota(self, dim: str) -> float | None:
        """The group's rate for a dimension, or None when it is unlimited (-1 or 0)."""
        if self.limits is None:
            return None
        rate: int = getattr(self.limits, RATE_COLUMN[dim])
        return float(rate) if rate > 0 else None


def parse_namespace(ref: str) -> NamespaceKey:
    tenant, _, namespace = ref.partition("/")
    return tenant, namespace


def effective_groups(
    session: Session, keys: Iterable[NamespaceKey]
) -> dict[NamespaceKey, Effective]:
    """Each namespace's effective group and its limits; NotFound names a missing namespace."""
    keys = list(keys)
    group = func.coalesce(Namespace.resource_group, Tenant.resource_group)
    rows = session.execute(
        select(Namespace.tenant, Namespace.name, group, ResourceGroup)
        .join(Tenant, Tenant.name == Namespace.tenant)
        .outerjoin(ResourceGroup, ResourceGroup.name == group)
        .where(tuple_(Namespace.tenant, Namespace.name).in_(keys))
    )
    found = {(tenant, name): Effective(name_, limits) for tenant, name, name_, limits in rows}
    for key in keys:
        if key not in found:
            raise NotFound(f"Namespace does not exist: {key[0]}/{key[1]}")
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
    owner = session.scalar(
        select(QuotaReporter.role).where(QuotaReporter.reporter_id == reporter_id)
    )
    if owner is not None and owner != principal.role and not principal.is_superuser:
        raise Forbidden(f"Reporter {reporter_id} belongs to another role")
    if alive:
        statement = insert(session, QuotaReporter).values(
            reporter_id=reporter_id, role=owner or principal.role, last_seen_at=now
        )
        session.execute(
            statement.on_conflict_do_update(
                index_elements=["reporter_id"],
                set_={"last_seen_at": statement.excluded.last_seen_at},
            )
        )


def submit(
    session: Session,
    *,
    principal: Principal,
    reporter_id: str,
    report: UsageReport,
    now: float,
    interval_s: float,
) -> ReportResult:
    """Store a report (unless it is too old) and answer with the reporter's allocations."""
    refs = {parse_namespace(ref): ref for ref in report.namespaces}
    effective = effective_groups(session, refs)
    authorize_reporting(session, principal, refs)
    accepted = now - report.sentAtMs / 1000 <= STALE_REPORT_INTERVALS * interval_s
    moment = datetime.fromtimestamp(now, UTC)
    claim_reporter(session, principal, reporter_id, moment, alive=accepted)

    stored = {
        (row.tenant, row.namespace): row
        for row in session.scalars(select(QuotaUsage).where(QuotaUsage.reporter_id == reporter_id))
    }
    covered_s = report.intervalMs / 1000
    own = {
        key: Figures.from_report(report.namespaces[ref], covered_s).with_allocation(
            Figures.from_row(stored[key]).allocation if key in stored else None
        )
        for key, ref in refs.items()
    }
    grants = _allocate(session, effective, own, reporter_id, moment, interval_s)
    granted = {
        key: {dim: None if grant is None else grant.rate for dim, grant in dims.items()}
        for key, dims in grants.items()
    }
    if accepted:
        _write(session, reporter_id, stored, own, granted, moment, interval_s)
    # A reporter still settling into its share reports again sooner than the interval.
    next_report_s = min(
        (
            grant.report_after(interval_s)
            for dims in grants.values()
            for grant in dims.values()
            if grant is not None
        ),
        default=interval_s,
    )
    return ReportResult(
        accepted=accepted,
        reportIntervalMs=max(1, round(next_report_s * 1000)),
        namespaces={
            ref: NamespaceAllocation(
                resourceGroup=effective[key].group,
                limits=limits_of(effective[key]),
                allocations={
                    JSON_NAME[dim]: UNLIMITED if rate is None else rate
                    for dim, rate in granted[key].items()
                },
            )
            for key, ref in refs.items()
        },
    )


def unit_id(reporter_id: str, key: NamespaceKey) -> str:
    """What one allocation is for: one reporter's limiters for one namespace."""
    return f"{reporter_id}@{key[0]}/{key[1]}"


def _allocate(
    session: Session,
    effective: dict[NamespaceKey, Effective],
    own: dict[NamespaceKey, Figures],
    reporter_id: str,
    now: datetime,
    interval_s: float,
) -> dict[NamespaceKey, dict[str, Grant | None]]:
    """The reporter's grant per namespace and dimension; None where its group sets no limit."""
    granted: dict[NamespaceKey, dict[str, Grant | None]] = {
        key: dict.fromkeys(DIMENSIONS) for key in own
    }
    limited = {
        e.group: e
        for e in effective.values()
        if e.group is not None and any(e.quota(dim) for dim in DIMENSIONS)
    }
    members: dict[str, dict[str, Figures]] = defaultdict(dict)
    for group, unit, figures in _peer_units(session, set(limited), reporter_id, now, interval_s):
        members[group][unit] = figures
    for key, figures in own.items():
        own_group = effective[key].group
        if own_group is not None and own_group in limited:
            members[own_group][unit_id(reporter_id, key)] = figures
    for group, units in members.items():
        for dim in DIMENSIONS:
            quota = limited[group].quota(dim)
            if quota is None:
                continue
            shares = plan(
                quota,
                [
                    Report(unit, f.usage[dim], f.demand[dim], f.allocation[dim])
                    for unit, f in units.items()
                ],
            )
            for key in own:
                if effective[key].group == group:
                    granted[key][dim] = shares[unit_id(reporter_id, key)]
    return granted


def _peer_units(
    session: Session, groups: set[str], reporter_id: str, now: datetime, interval_s: float
) -> Iterable[tuple[str, str, Figures]]:
    """Fresh figures of every other reporter in these groups: (group, unit, figures)."""
    if not groups:
        return
    group = func.coalesce(Namespace.resource_group, Tenant.resource_group)
    rows = session.execute(
        select(QuotaUsage, group)
        .join(QuotaReporter, QuotaReporter.reporter_id == QuotaUsage.reporter_id)
        .join(
            Namespace,
            (Namespace.tenant == QuotaUsage.tenant) & (Namespace.name == QuotaUsage.namespace),
        )
        .join(Tenant, Tenant.name == Namespace.tenant)
        .where(group.in_(groups))
        .where(QuotaUsage.reporter_id != reporter_id)
        .where(QuotaReporter.last_seen_at > now - timedelta(seconds=SILENT_INTERVALS * interval_s))
        .where(
            QuotaUsage.written_at > now - timedelta(seconds=(REFRESH_INTERVALS + 1) * interval_s)
        )
    )
    for usage, group_name in rows:
        key = (usage.tenant, usage.namespace)
        yield str(group_name), unit_id(usage.reporter_id, key), Figures.from_row(usage)


def _write(
    session: Session,
    reporter_id: str,
    stored: dict[NamespaceKey, QuotaUsage],
    own: dict[NamespaceKey, Figures],
    granted: dict[NamespaceKey, dict[str, float | None]],
    now: datetime,
    interval_s: float,
) -> None:
    """Write the rows that moved (or are due a refresh); drop namespaces no longer reported."""
    rows = []
    for key, figures in own.items():
        new = figures.with_allocation(granted[key])
        old = stored.get(key)
        if old is None or _due(old, new, now, interval_s):
            rows.append(
                {
                    "reporter_id": reporter_id,
                    "tenant": key[0],
                    "namespace": key[1],
                    "written_at": now,
                    **new.columns(),
                }
            )
    if rows:
        statement = insert(session, QuotaUsage)
        session.execute(
            statement.on_conflict_do_update(
                index_elements=["reporter_id", "tenant", "namespace"],
                set_={
                    column: statement.excluded[column]
                    for column in rows[0]
                    if column not in ("reporter_id", "tenant", "namespace")
                },
            ),
            rows,
        )
    gone = set(stored) - set(own)
    if gone:
        session.execute(
            delete(QuotaUsage)
            .where(QuotaUsage.reporter_id == reporter_id)
            .where(tuple_(QuotaUsage.tenant, QuotaUsage.namespace).in_(gone))
        )


def _due(old: QuotaUsage, new: Figures, now: datetime, interval_s: float) -> bool:
    """Whether a row must be rewritten: it is due a refresh, or a figure moved noticeably.

    Allocations are what other reporters' headroom is computed from, so any real change to
    them is written; usage and demand may drift by less than 5% unrecorded, for at most
    ``REFRESH_INTERVALS`` intervals.
    """
    age = (now - _aware(old.written_at)).total_seconds()
    if age >= (REFRESH_INTERVALS - 1) * interval_s:
        return True
    previous = Figures.from_row(old)
    for dim in DIMENSIONS:
        if _moved(previous.usage[dim], new.usage[dim], SIGNIFICANT_CHANGE):
            return True
        if _moved(previous.demand[dim], new.demand[dim], SIGNIFICANT_CHANGE):
            return True
        before, after = previous.allocation[dim], new.allocation[dim]
        if (before is None) != (after is None):
            return True
        if before is not None and after is not None and _moved(before, after, 0.001):
            return True
    return False


def _moved(before: float, after: float, tolerance: float) -> bool:
    return abs(after - before) > tolerance * max(abs(before), abs(after), 1.0)


def _aware(moment: datetime) -> datetime:
    # SQLite hands timestamps back without their (UTC) zone.
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def limits_of(effective: Effective) -> ResourceGroupRead | None:
    return None if effective.limits is None else to_read(effective.limits)


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
