"""Namespaces and their permissions."""

from __future__ import annotations

from collections.abc import Collection

from sqlalchemy import delete, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from app.errors import Conflict, NamespaceNotFound, TenantNotFound
from app.models import Namespace, NamespacePermission
from app.services import tenants
from app.services._sql import insert, rowcount


def get(session: Session, tenant: str, name: str) -> Namespace:
    namespace = session.get(Namespace, (tenant, name))
    if namespace is None:
        raise NamespaceNotFound
    return namespace


def list_names(session: Session, tenant: str) -> list[str]:
    tenants.get(session, tenant)
    names = session.scalars(
        select(Namespace.name).where(Namespace.tenant == tenant).order_by(Namespace.name)
    )
    return [f"{tenant}/{name}" for name in names]


def create(session: Session, tenant: str, name: str) -> None:
    tenants.get(session, tenant)
    try:
        touched = rowcount(
            session,
            insert(session, Namespace).values(tenant=tenant, name=name).on_conflict_do_nothing(),
        )
    except IntegrityError as exc:
        # The tenant was deleted between the check and the insert.
        raise TenantNotFound from exc
    if touched == 0:
        raise Conflict("Namespace already exists")


def remove(session: Session, tenant: str, name: str) -> None:
    touched = rowcount(
        session, delete(Namespace).where(Namespace.tenant == tenant, Namespace.name == name)
    )
    if touched == 0:
        raise NamespaceNotFound


def permissions(session: Session, tenant: str, name: str) -> dict[str, list[str]]:
    get(session, tenant, name)
    rows = session.execute(
        select(NamespacePermission.role, NamespacePermission.actions)
        .where(NamespacePermission.tenant == tenant, NamespacePermission.namespace == name)
        .order_by(NamespacePermission.role)
    )
    return {role: actions for role, actions in rows}


def grant(session: Session, tenant: str, name: str, role: str, actions: Collection[str]) -> None:
    """Set the role's actions on the namespace, replacing what it had (as Pulsar does)."""
    get(session, tenant, name)
    statement = insert(session, NamespacePermission).values(
        tenant=tenant, namespace=name, role=role, actions=sorted(set(actions))
    )
    try:
        session.execute(
            statement.on_conflict_do_update(
                index_elements=["tenant", "namespace", "role"],
                set_={"actions": statement.excluded.actions},
            )
        )
    except IntegrityError as exc:
        raise NamespaceNotFound from exc


def revoke(session: Session, tenant: str, name: str, role: str) -> None:
    get(session, tenant, name)
    session.execute(
        delete(NamespacePermission).where(
            NamespacePermission.tenant == tenant,
            NamespacePermission.namespace == name,
            NamespacePermission.role == role,
        )
    )
