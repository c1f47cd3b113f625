"""Reporters: who may report for a namespace, which role a reporter belongs to, and when
one is gone (released at exit, or silent too long) and its shares return to the others."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta

from sqlalchemy import Connection, select, tuple_
from sqlalchemy.orm import Session

from app.access import Principal
from app.errors import Forbidden, NotFound, TooManyRequests
from app.models import NamespacePermission, Tenant
from app.quota.cache import ReportCache
from app.quota.effective import NamespaceKey
from app.quota.statements import new_token, remark, statements, statements_for

__all__ = [
    "SILENT_INTERVALS",
    "authorize_reporting",
    "claim_reporter",
    "expire",
    "limit_reporters",
    "release",
]

SILENT_INTERVALS = 3  # a reporter not heard from for this long is gone
REPORTING_ACTIONS = frozenset({"produce", "consume"})


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
) -> int | None:
    """The reporter belongs to the role that first reported with it; mark it alive.

    Returns the token of its rows, None if it has none.
    """
    connection, sql = statements(session)
    if alive:
        # One statement: marked alive, and the owner returned. Refused, the transaction
        # rolls back, and the mark with it.
        owner, token = connection.execute(
            sql.claim,
            {"reporter_id": reporter_id, "role": principal.role, "now": now, "token": new_token()},
        ).one()
    else:
        found = connection.execute(sql.owner, {"reporter_id": reporter_id}).one_or_none()
        owner, token = (None, None) if found is None else found
    if owner is not None and owner != principal.role and not principal.is_superuser:
        raise Forbidden(f"Reporter {reporter_id} belongs to another role")
    return token  # type: ignore[no-any-return]


def limit_reporters(
    connection: Connection,
    principal: Principal,
    reporter_id: str,
    keys: list[NamespaceKey],
    now: datetime,
    interval_s: float,
    most: int,
) -> None:
    """Refuse a reporter new to namespaces where its role already has ``most`` live ones.

    Shares go to namespaces first, so more reporter ids win a namespace no more quota; the
    cap keeps a role from growing the server's tables and memory without bound. Superusers
    are exempt. Counted without a lock: reporters joining at the same instant may pass it
    together, which only bounds the count a little more loosely.
    """
    if principal.is_superuser:
        return
    sql = statements_for(connection)
    parameters = {
        "role": principal.role,
        "reporter_id": reporter_id,
        "alive_after": now - timedelta(seconds=SILENT_INTERVALS * interval_s),
        **sql.keys(keys),
    }
    for tenant, namespace, count in connection.execute(sql.live_reporters, parameters):
        if count >= most:
            raise TooManyRequests(
                f"Role {principal.role} has {count} live reporters in namespace "
                f"{tenant}/{namespace}, the most allowed (RG_MAX_REPORTERS_PER_NAMESPACE); "
                "reuse a reporter id per process, or wait for silent ones to expire"
            )


def release(
    session: Session,
    principal: Principal,
    reporter_id: str,
    now: datetime,
    cache: ReportCache | None = None,
) -> None:
    """Free a reporter's shares at once (PIP-82's "report 0"), as rgspark does at exit."""
    connection, sql = statements(session)
    found = connection.execute(sql.owner, {"reporter_id": reporter_id}).one_or_none()
    if found is None:
        raise NotFound("Reporter does not exist")
    if found[0] != principal.role and not principal.is_superuser:
        raise Forbidden(f"Reporter {reporter_id} belongs to another role")
    _forget(connection, [reporter_id], now, cache)


def expire(
    session: Session, now: datetime, interval_s: float, cache: ReportCache | None = None
) -> None:
    """Forget reporters silent for `SILENT_INTERVALS`: their shares return to the others,
    and their rows go with them, so the tables do not grow without bound."""
    connection, sql = statements(session)
    silent_after = now - timedelta(seconds=SILENT_INTERVALS * interval_s)
    silent = list(connection.execute(sql.silent, {"silent_after": silent_after}).scalars())
    if silent:
        _forget(connection, silent, now, cache)
    connection.execute(sql.forget_markers)


def _forget(
    connection: Connection, reporter_ids: list[str], now: datetime, cache: ReportCache | None
) -> None:
    sql = statements_for(connection)
    parameters = {"reporters": reporter_ids}
    groups = connection.execute(sql.groups_of_reporters, parameters).scalars()
    remark(connection, [group for group in groups if group is not None], now)
    connection.execute(sql.forget_reporters, parameters)  # their rows go by cascade
    if cache is not None:
        cache.forget(reporter_ids)
