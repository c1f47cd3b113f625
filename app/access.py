"""Who may do what: superusers everything, tenant admins their tenant, clients their namespace."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.errors import Forbidden, NamespaceNotFound
from app.models import Namespace, Tenant
from app.services import attachments


@dataclass(frozen=True, slots=True)
class Principal:
    role: str
    is_superuser: bool


def require_tenant_admin(session: Session, principal: Principal, tenant: str) -> None:
    """Superusers pass; others must be in the tenant's ``adminRoles``.

    A missing tenant is a 403 too, with the same reason: a role without rights learns nothing
    of which tenants exist (superusers, who may list them, get the 404).
    """
    if principal.is_superuser:
        return
    # By primary key, so that an endpoint reading the tenant next finds it in the session.
    found = session.get(Tenant, tenant)
    if found is None or principal.role not in found.admin_roles:
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
    its namespaces, or by making one the default while some of its namespaces fall under it);
    otherwise a tenant admin could move a namespace to an unlimited group and lift its own
    quota.
    """
    if principal.is_superuser:
        return
    # Locked first and checked after, in a statement of its own: under PostgreSQL's read
    # committed, that statement sees what the tenant's previous checked write committed.
    attachments.lock_tenant(session, tenant)
    used = select(Tenant.name).where(Tenant.name == tenant, attachments.tenant_uses(group))
    if session.scalar(used) is None:
        raise Forbidden(
            f"Tenant admins may only attach ResourceGroups that tenant {tenant} already uses"
        )


# A tenant admin never lifts a quota: it leaves a namespace without a group of its own (by
# detaching it, or by deleting it, for it could create it again), or creates one without a group
# beside limited ones, only while the tenant's group or the default would cover it. Before the
# write, and in this order (the order of every checked write, so none waits on another in a
# cycle): the tenant's row is locked, then the namespace's, then the default's. A concurrent
# attachment to the namespace, detach from the tenant or change of the default is then either seen
# by the check or waits until the write has committed.


def require_detach_keeps_a_group(
    session: Session, principal: Principal, tenant: str, namespace: str
) -> None:
    """Tenant admins may detach a namespace's group only if it then falls under another."""
    if not principal.is_superuser and _left_without_group(
        session, tenant, namespace, deleting=False
    ):
        raise Forbidden(
            f"Detaching would leave namespace {tenant}/{namespace} without a ResourceGroup "
            "(its tenant has none and there is no default); only superusers may"
        )


def require_delete_keeps_a_group(
    session: Session, principal: Principal, tenant: str, namespace: str
) -> None:
    """Tenant admins may delete a namespace with a group of its own only if, created again,
    it would fall under another: otherwise deleting and recreating it would lift its quota."""
    if not principal.is_superuser and _left_without_group(
        session, tenant, namespace, deleting=True
    ):
        raise Forbidden(
            f"Namespace {tenant}/{namespace} has its own ResourceGroup and, created again, would "
            "have none (its tenant has none and there is no default); only superusers may "
            "delete it"
        )


def require_create_is_covered(session: Session, principal: Principal, tenant: str) -> None:
    """Tenant admins may create a namespace only where it falls under a group (its tenant's
    or the default) or where none of the tenant's namespaces is limited: otherwise a new
    name would escape the quota that the tenant's other namespaces are held to."""
    if principal.is_superuser or attachments.lock_tenant(session, tenant) is not None:
        return
    if attachments.get_default(session, lock=True) is not None:
        return
    limited = session.scalar(
        select(Namespace.name)
        .where(Namespace.tenant == tenant, Namespace.resource_group.is_not(None))
        .limit(1)
    )
    if limited is not None:
        raise Forbidden(
            f"A new namespace of tenant {tenant} would have no ResourceGroup while its "
            f"namespaces have theirs (its tenant has none and there is no default): ask a "
            f"superuser to create it, or to attach a ResourceGroup to tenant {tenant}"
        )


def _left_without_group(session: Session, tenant: str, namespace: str, *, deleting: bool) -> bool:
    """Whether losing its own group would leave the namespace under none, where it had one."""
    inherited = attachments.lock_tenant(session, tenant)
    own = session.execute(
        select(Namespace.resource_group)
        .where(Namespace.tenant == tenant, Namespace.name == namespace)
        # The lock the write takes anyway; a detach's does not hold back reports (key share).
        .with_for_update(key_share=not deleting)
    ).one_or_none()
    if own is None:
        raise NamespaceNotFound
    if own[0] is None or inherited is not None:
        return False
    return attachments.get_default(session, lock=True) is None
