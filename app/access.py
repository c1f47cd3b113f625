"""Who may do what: superusers everything, tenant admins their tenant, clients their namespace."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.errors import Forbidden
from app.models import Namespace, Tenant
from app.services import tenants


@dataclass(frozen=True, slots=True)
class Principal:
    role: str
    is_superuser: bool


def require_tenant_admin(session: Session, principal: Principal, tenant: str) -> None:
    """Superusers pass; others must be in the tenant's ``adminRoles`` (404 if it is missing)."""
    if principal.is_superuser:
        return
    if principal.role not in tenants.get(session, tenant).admin_roles:
        raise Forbidden(f"Role {principal.role} is not an admin of tenant {tenant}")


def require_group_reader(principal: Principal, readers: frozenset[str]) -> None:
    """Tenant admins may read the groups attached to their tenant or its namespaces."""
    if not principal.is_superuser and principal.role not in readers:
        raise Forbidden(
            "Only superusers and admins of a tenant using this ResourceGroup may read it"
        )


def require_group_used_by_tenant(
    session: Session, principal: Principal, tenant: str, group: str
) -> None:
    """Tenant admins may attach to a namespace only a group their tenant already uses.

    Superusers decide which groups a tenant gets (by attaching them to the tenant or to one of
    its namespaces); otherwise a tenant admin could move a namespace to an unlimited group and
    lift its own quota.
    """
    if principal.is_superuser:
        return
    used = select(Tenant.name).where(
        Tenant.name == tenant,
        (Tenant.resource_group == group)
        | Tenant.name.in_(select(Namespace.tenant).where(Namespace.resource_group == group)),
    )
    if session.scalar(used) is None:
        raise Forbidden(
            f"Tenant admins may only attach ResourceGroups that tenant {tenant} already uses"
        )
