"""``/admin/v2/namespaces``: namespaces, permissions and namespace attachments (tenant admins)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body

from app import access
from app.api.deps import PrincipalDep, SessionDep
from app.errors import (
    BadRequest,
    Conflict,
    Forbidden,
    NotFound,
    PreconditionFailed,
    Unauthorized,
    responses,
)
from app.schemas import AuthAction, NamespaceName, ResourceGroupName, RoleName, TenantName
from app.services import attachments, namespaces

router = APIRouter(prefix="/admin/v2/namespaces", tags=["namespaces"])

_READ_ERRORS = responses(BadRequest, Unauthorized, Forbidden, NotFound)


@router.get("/{tenant}", responses=_READ_ERRORS)
def list_namespaces(
    *, session: SessionDep, principal: PrincipalDep, tenant: TenantName
) -> list[str]:
    """List a tenant's namespaces as ``tenant/namespace``."""
    access.require_tenant_admin(session, principal, tenant)
    return namespaces.list_names(session, tenant)


@router.put(
    "/{tenant}/{namespace}",
    status_code=204,
    responses=responses(BadRequest, Unauthorized, Forbidden, NotFound, Conflict),
)
def create_namespace(
    *,
    session: SessionDep,
    principal: PrincipalDep,
    tenant: TenantName,
    namespace: NamespaceName,
    policies: Annotated[
        dict[str, Any] | None,
        Body(description="Pulsar namespace policies; accepted for compatibility and not stored."),
    ] = None,
) -> None:
    """Create a namespace in a tenant."""
    access.require_tenant_admin(session, principal, tenant)
    namespaces.create(session, tenant, namespace)


@router.delete("/{tenant}/{namespace}", status_code=204, responses=_READ_ERRORS)
def delete_namespace(
    *, session: SessionDep, principal: PrincipalDep, tenant: TenantName, namespace: NamespaceName
) -> None:
    """Delete a namespace, with its permissions and attachment."""
    access.require_tenant_admin(session, principal, tenant)
    namespaces.remove(session, tenant, namespace)


@router.get("/{tenant}/{namespace}/permissions", responses=_READ_ERRORS)
def get_permissions(
    *, session: SessionDep, principal: PrincipalDep, tenant: TenantName, namespace: NamespaceName
) -> dict[str, list[str]]:
    """Get the actions each role is granted on a namespace."""
    access.require_tenant_admin(session, principal, tenant)
    return namespaces.permissions(session, tenant, namespace)


@router.post("/{tenant}/{namespace}/permissions/{role}", status_code=204, responses=_READ_ERRORS)
def grant_permission(
    *,
    session: SessionDep,
    principal: PrincipalDep,
    tenant: TenantName,
    namespace: NamespaceName,
    role: RoleName,
    actions: Annotated[
        list[AuthAction],
        Body(description='Actions to grant, replacing the current ones: ["produce", "consume"]'),
    ],
) -> None:
    """Grant a role actions on a namespace; ``produce``/``consume`` let its jobs report usage."""
    access.require_tenant_admin(session, principal, tenant)
    namespaces.grant(session, tenant, namespace, role, list(actions))


@router.delete("/{tenant}/{namespace}/permissions/{role}", status_code=204, responses=_READ_ERRORS)
def revoke_permission(
    *,
    session: SessionDep,
    principal: PrincipalDep,
    tenant: TenantName,
    namespace: NamespaceName,
    role: RoleName,
) -> None:
    """Revoke all of a role's actions on a namespace."""
    access.require_tenant_admin(session, principal, tenant)
    namespaces.revoke(session, tenant, namespace, role)


@router.get("/{tenant}/{namespace}/resourcegroup", responses=_READ_ERRORS)
def get_namespace_resource_group(
    *, session: SessionDep, principal: PrincipalDep, tenant: TenantName, namespace: NamespaceName
) -> str | None:
    """Get the name of the ResourceGroup attached to a namespace itself, or null."""
    access.require_tenant_admin(session, principal, tenant)
    return namespaces.get(session, tenant, namespace).resource_group


@router.post(
    "/{tenant}/{namespace}/resourcegroup/{rg}",
    status_code=204,
    responses=responses(BadRequest, Unauthorized, Forbidden, NotFound, PreconditionFailed),
)
def set_namespace_resource_group(
    *,
    session: SessionDep,
    principal: PrincipalDep,
    tenant: TenantName,
    namespace: NamespaceName,
    rg: ResourceGroupName,
) -> None:
    """Attach a ResourceGroup to a namespace; it takes precedence over the tenant's."""
    access.require_tenant_admin(session, principal, tenant)
    access.require_group_used_by_tenant(session, principal, tenant, rg)
    attachments.set_for_namespace(session, tenant, namespace, rg)


@router.delete("/{tenant}/{namespace}/resourcegroup", status_code=204, responses=_READ_ERRORS)
def remove_namespace_resource_group(
    *, session: SessionDep, principal: PrincipalDep, tenant: TenantName, namespace: NamespaceName
) -> None:
    """Detach the ResourceGroup from a namespace (the tenant's group, if any, then applies)."""
    access.require_tenant_admin(session, principal, tenant)
    attachments.set_for_namespace(session, tenant, namespace, None)
