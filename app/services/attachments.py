"""Attaching ResourceGroups to tenants and namespaces, and the effective group of a namespace."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from app.errors import NotFound, PreconditionFailed
from app.models import Namespace, Tenant
from app.services._sql import rowcount

GROUP_MISSING = "ResourceGroup does not exist"


def _set(session: Session, statement: Any, group: str | None, missing: str) -> None:
    # No existence check first: the foreign key refuses a missing group atomically, even
    # against a concurrent delete, and a missing tenant or namespace updates no row.
    try:
        touched = rowcount(session, statement.values(resource_group=group))
    except IntegrityError as exc:
        raise PreconditionFailed(GROUP_MISSING) from exc
    if touched == 0:
        raise NotFound(missing)


def set_for_namespace(session: Session, tenant: str, namespace: str, group: str | None) -> None:
    statement = update(Namespace).where(Namespace.tenant == tenant, Namespace.name == namespace)
    _set(session, statement, group, "Namespace does not exist")


def set_for_tenant(session: Session, tenant: str, group: str | None) -> None:
    _set(session, update(Tenant).where(Tenant.name == tenant), group, "Tenant does not exist")


def effective_group(session: Session, tenant: str, namespace: str) -> str | None:
    """The namespace's own group if any, else its tenant's, else none: exactly one group counts."""
    row = session.execute(
        select(Namespace.resource_group, Tenant.resource_group)
        .join(Tenant, Tenant.name == Namespace.tenant)
        .where(Namespace.tenant == tenant, Namespace.name == namespace)
    ).one_or_none()
    if row is None:
        raise NotFound("Namespace does not exist")
    own, inherited = row
    return own if own is not None else inherited
