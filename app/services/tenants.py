"""Tenants and their ResourceGroup attachment."""

from __future__ import annotations

from sqlalchemy import delete, exists, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from app.errors import Conflict, TenantHasNamespaces, TenantNotFound
from app.models import Namespace, Tenant
from app.schemas import TenantInfo
from app.services._sql import insert, rowcount


def get(session: Session, name: str) -> Tenant:
    tenant = session.get(Tenant, name)
    if tenant is None:
        raise TenantNotFound
    return tenant


def list_names(session: Session) -> list[str]:
    return list(session.scalars(select(Tenant.name).order_by(Tenant.name)))


def create(session: Session, name: str, info: TenantInfo) -> None:
    touched = rowcount(
        session,
        insert(session, Tenant)
        .values(name=name, admin_roles=info.adminRoles, allowed_clusters=info.allowedClusters)
        .on_conflict_do_nothing(),
    )
    if touched == 0:
        raise Conflict("Tenant already exists")


def update_info(session: Session, name: str, info: TenantInfo) -> None:
    touched = rowcount(
        session,
        update(Tenant)
        .where(Tenant.name == name)
        .values(admin_roles=info.adminRoles, allowed_clusters=info.allowedClusters),
    )
    if touched == 0:
        raise TenantNotFound


def remove(session: Session, name: str) -> None:
    get(session, name)
    if session.scalar(select(exists().where(Namespace.tenant == name))):
        raise TenantHasNamespaces
    try:
        session.execute(delete(Tenant).where(Tenant.name == name))
    except IntegrityError as exc:
        raise TenantHasNamespaces from exc
