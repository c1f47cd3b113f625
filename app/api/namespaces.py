"""``/admin/v2/namespaces``: namespaces, permissions and namespace attachments (tenant admins)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, TypeVar

from fastapi import APIRouter, Body, Request

from app import access
from app.api import deps
from app.api.security import principal_of
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

T = TypeVar("T")


async def as_tenant_admin(
    request: Request, tenant: str, operation: Callable[[deps.Session], T], *, writes: bool = False
) -> T:
    """Run `operation` in one transaction, after checking the caller administers `tenant`."""
    principal = principal_of(request)

    def work(session: deps.Session) -> T:
        access.require_tenant_admin(session, principal, tenant)
        return operation(session)

    return await (deps.write if writes else deps.read)(request, work)


@router.get("/{tenant}", responses=_READ_ERRORS)
async def list_namespaces(request: Request, tenant: TenantName) -> list[str]:
    """List a tenant's namespaces as ``tenant/namespace``."""
    return await as_tenant_admin(
        request, tenant, lambda session: namespaces.list_names(session, tenant)
    )


@router.put(
    "/{tenant}/{namespace}",
    status_code=204,
    responses=responses(BadRequest, Unauthorized, Forbidden, NotFound, Conflict),
)
async def create_namespace(
    request: Request,
    tenant: TenantName,
    namespace: NamespaceName,
    policies: Annotated[
        dict[str, Any] | None,
        Body(description="Pulsar namespace policies; accepted for compatibility and not stored."),
    ] = None,
) -> None:
    """Create a namespace in a tenant."""
    await as_tenant_admin(
        request,
        tenant,
        lambda session: namespaces.create(session, tenant, namespace),
        writes=True,
    )


@router.delete("/{tenant}/{namespace}", status_code=204, responses=_READ_ERRORS)
async def delete_namespace(request: Request, tenant: TenantName, namespace: NamespaceName) -> None:
    """Delete a namespace, with its permissions and attachment."""
    await as_tenant_admin(
        request,
        tenant,
        lambda session: namespaces.remove(session, tenant, namespace),
        writes=True,
    )


@router.get("/{tenant}/{namespace}/permissions", responses=_READ_ERRORS)
async def get_permissions(
    request: Request, tenant: TenantName, namespace: NamespaceName
) -> dict[str, list[str]]:
    """Get the actions each role is granted on a namespace."""
    return await as_tenant_admin(
        request, tenant, lambda session: namespaces.permissions(session, tenant, namespace)
    )


@router.post("/{tenant}/{namespace}/permissions/{role}", status_code=204, responses=_READ_ERRORS)
async def grant_permission(
    request: Request,
    tenant: TenantName,
    namespace: NamespaceName,
    role: RoleName,
    actions: Annotated[
        list[AuthAction],
        Body(description='Actions to grant, replacing the current ones: ["produce", "consume"]'),
    ],
) -> None:
    """Grant a role actions on a namespace; ``produce``/``consume`` let its jobs report usage."""
    await as_tenant_admin(
        request,
        tenant,
        lambda session: namespaces.grant(session, tenant, namespace, role, list(actions)),
        writes=True,
    )


@router.delete("/{tenant}/{namespace}/permissions/{role}", status_code=204, responses=_READ_ERRORS)
async def revoke_permission(
    request: Request, tenant: TenantName, namespace: NamespaceName, role: RoleName
) -> None:
    """Revoke all of a role's actions on a namespace."""
    await as_tenant_admin(
        request,
        tenant,
        lambda session: namespaces.revoke(session, tenant, namespace, role),
        writes=True,
    )


@router.get("/{tenant}/{namespace}/resourcegroup", responses=_READ_ERRORS)
async def get_namespace_resource_group(
    request: Request, tenant: TenantName, namespace: NamespaceName
) -> str | None:
    """Get the name of the ResourceGroup attached to a namespace itself, or null."""
    return await as_tenant_admin(
        request, tenant, lambda session: namespaces.get(session, tenant, namespace).resource_group
    )


@router.post(
    "/{tenant}/{namespace}/resourcegroup/{rg}",
    status_code=204,
    responses=responses(BadRequest, Unauthorized, Forbidden, NotFound, PreconditionFailed),
)
async def set_namespace_resource_group(
    request: Request, tenant: TenantName, namespace: NamespaceName, rg: ResourceGroupName
) -> None:
    """Attach a ResourceGroup to a namespace; it takes precedence over the tenant's."""
    principal = principal_of(request)

    def attach(session: deps.Session) -> None:
        access.require_group_used_by_tenant(session, principal, tenant, rg)
        attachments.set_for_namespace(session, tenant, namespace, rg)

    await as_tenant_admin(request, tenant, attach, writes=True)


@router.delete("/{tenant}/{namespace}/resourcegroup", status_code=204, responses=_READ_ERRORS)
async def remove_namespace_resource_group(
    request: Request, tenant: TenantName, namespace: NamespaceName
) -> None:
    """Detach the ResourceGroup from a namespace (the tenant's group, if any, then applies)."""
    await as_tenant_admin(
        request,
        tenant,
        lambda session: attachments.set_for_namespace(session, tenant, namespace, None),
        writes=True,
    )
