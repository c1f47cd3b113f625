"""Attaching ResourceGroups to tenants, namespaces and as the default, and which group applies.

A namespace counts against exactly one group, its **effective group**: its own attachment if
any, else its tenant's, else the default group, else none (unlimited).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import ColumnElement, ScalarSelect, delete, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from app.errors import (
    NamespaceNotFound,
    NotFound,
    ResourceGroupToAttachNotFound,
    TenantNotFound,
)
from app.models import DEFAULT_GROUP_ROW, DefaultResourceGroup, Namespace, Tenant
from app.schemas import AppliedResourceGroup, GroupSource
from app.services._sql import insert, rowcount


def _set(session: Session, statement: Any, group: str | None, missing: type[NotFound]) -> None:
    # No existence check first: the foreign key refuses a missing group atomically, even
    # against a concurrent delete, and a missing tenant or namespace updates no row.
    try:
        touched = rowcount(session, statement.values(resource_group=group))
    except IntegrityError as exc:
        raise ResourceGroupToAttachNotFound from exc
    if touched == 0:
        raise missing


def set_for_namespace(session: Session, tenant: str, namespace: str, group: str | None) -> None:
    statement = update(Namespace).where(Namespace.tenant == tenant, Namespace.name == namespace)
    _set(session, statement, group, NamespaceNotFound)


def set_for_tenant(session: Session, tenant: str, group: str | None) -> None:
    _set(session, update(Tenant).where(Tenant.name == tenant), group, TenantNotFound)


def default_group_query() -> ScalarSelect[str]:
    """The default group's name as a subquery: NULL when there is none."""
    return select(DefaultResourceGroup.resource_group).scalar_subquery()


def get_default(session: Session, *, lock: bool = False) -> str | None:
    """The default group; with ``lock``, it cannot change (PostgreSQL, ``FOR SHARE``) until
    the transaction ends."""
    query = select(DefaultResourceGroup.resource_group)
    return session.scalar(query.with_for_update(read=True) if lock else query)


def set_default(session: Session, group: str | None) -> None:
    """Make ``group`` the default (412 if it does not exist), or have none."""
    if group is None:
        session.execute(delete(DefaultResourceGroup))
        return
    # Not an upsert: on SQLite an ON CONFLICT DO UPDATE would govern the conflicts of the
    # admin generation's trigger too, and fail its INSERT OR REPLACE.
    change = update(DefaultResourceGroup).values(resource_group=group)
    create = (
        insert(session, DefaultResourceGroup)
        .values(id=DEFAULT_GROUP_ROW, resource_group=group)
        .on_conflict_do_nothing()
    )
    try:
        # When the insert finds a row after all, a concurrent first default was committed.
        if rowcount(session, change) == 0 and rowcount(session, create) == 0:
            session.execute(change)
    except IntegrityError as exc:  # the foreign key, as for the other attachments
        raise ResourceGroupToAttachNotFound from exc


def tenant_uses(group: str) -> ColumnElement[bool]:
    """Whether a tenant row uses ``group``: attached to the tenant or one of its namespaces,
    or the default group while some namespace of the tenant falls under it."""

    def has_namespace(where: ColumnElement[bool]) -> ColumnElement[bool]:
        return Tenant.name.in_(select(Namespace.tenant).where(where))

    return (
        (Tenant.resource_group == group)
        | has_namespace(Namespace.resource_group == group)
        | (
            Tenant.resource_group.is_(None)
            & (default_group_query() == group)
            & has_namespace(Namespace.resource_group.is_(None))
        )
    )


def applied_group(session: Session, tenant: str, namespace: str) -> AppliedResourceGroup:
    """The namespace's effective group and where it comes from; NotFound if it is missing."""
    row = session.execute(
        select(Namespace.resource_group, Tenant.resource_group, default_group_query())
        .join(Tenant, Tenant.name == Namespace.tenant)
        .where(Namespace.tenant == tenant, Namespace.name == namespace)
    ).one_or_none()
    if row is None:
        raise NamespaceNotFound
    sources: tuple[GroupSource, ...] = ("namespace", "tenant", "default")
    for group, source in zip(row, sources, strict=True):
        if group is not None:
            return AppliedResourceGroup(resourceGroup=group, source=source)
    return AppliedResourceGroup(resourceGroup=None, source=None)


def lock_tenant(session: Session, tenant: str) -> str | None:
    """The tenant's group, its row locked until the transaction ends; NotFound if missing.

    Tenant admins' checked changes to a tenant's attachments take turns on this lock, and a
    concurrent change to the tenant's own attachment waits for it, so each check reads what
    the writes before it committed (PostgreSQL; SQLite's writers are serialized already).
    ``FOR NO KEY UPDATE``, the lock an UPDATE takes: creating a namespace does not wait.
    """
    found = session.execute(
        select(Tenant.resource_group).where(Tenant.name == tenant).with_for_update(key_share=True)
    ).one_or_none()
    if found is None:
        raise TenantNotFound
    return found[0]
