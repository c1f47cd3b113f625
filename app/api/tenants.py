"""``/admin/v2/tenants``: tenants and the ResourceGroup attached to a whole tenant."""

from __future__ import annotations

from fastapi import APIRouter, Request

from app import access
from app.access import Principal
from app.api import deps
from app.api.deps import CurrentPrincipal, Superuser
from app.errors import (
    BadRequest,
    Conflict,
    Forbidden,
    NotFound,
    PreconditionFailed,
    Unauthorized,
    responses,
)
from app.schemas import ResourceGroupName, TenantInfo, TenantName
from app.services import attachments, tenants

router = APIRouter(prefix="/admin/v2/tenants", tags=["tenants"])

_READ_ERRORS = responses(BadRequest, Unauthorized, Forbidden, NotFound)


@router.get("", responses=responses(Unauthorized, Forbidden))
async def list_tenants(request: Request, _: Superuser) -> list[str]:
    """List the names of all tenants."""
    return await deps.read(request, tenants.list_names)


@router.get("/{tenant}", responses=_READ_ERRORS)
async def get_tenant(
    request: Request, principal: CurrentPrincipal, tenant: TenantName
) -> TenantInfo:
    """Get a tenant's admin roles and allowed clusters."""
    return await deps.read(request, _tenant_info, principal, tenant)


def _tenant_info(session: deps.Session, principal: Principal, tenant: str) -> TenantInfo:
    access.require_tenant_admin(session, principal, tenant)
    found = tenants.get(session, tenant)
    return TenantInfo(adminRoles=found.admin_roles, allowedClusters=found.allowed_clusters)


@router.put(
    "/{tenant}", status_code=204, responses=responses(BadRequest, Unauthorized, Forbidden, Conflict)
)
async def create_tenant(
    request: Request, _: Superuser, tenant: TenantName, body: TenantInfo
) -> None:
    """Create a tenant."""
    await deps.write(request, tenants.create, tenant, body)


@router.post("/{tenant}", status_code=204, responses=_READ_ERRORS)
async def update_tenant(
    request: Request, _: Superuser, tenant: TenantName, body: TenantInfo
) -> None:
    """Replace a tenant's admin roles and allowed clusters."""
    await deps.write(request, tenants.update_info, tenant, body)


@router.delete(
    "/{tenant}",
    status_code=204,
    responses=responses(BadRequest, Unauthorized, Forbidden, NotFound, Conflict),
)
async def delete_tenant(request: Request, _: Superuser, tenant: TenantName) -> None:
    """Delete a tenant that has no namespaces."""
    await deps.write(request, tenants.remove, tenant)


@router.get("/{tenant}/resourcegroup", responses=_READ_ERRORS)
async def get_tenant_resource_group(
    request: Request, principal: CurrentPrincipal, tenant: TenantName
) -> str | None:
    """Get the name of the ResourceGroup attached to a tenant, or null."""
    return await deps.read(request, _tenant_resource_group, principal, tenant)


def _tenant_resource_group(session: deps.Session, principal: Principal, tenant: str) -> str | None:
    access.require_tenant_admin(session, principal, tenant)
    return tenants.get(session, tenant).resource_group


@router.post(
    "/{tenant}/resourcegroup/{rg}",
    status_code=204,
    responses=responses(BadRequest, Unauthorized, Forbidden, NotFound, PreconditionFailed),
)
async def set_tenant_resource_group(
    request: Request, _: Superuser, tenant: TenantName, rg: ResourceGroupName
) -> None:
    """Attach a ResourceGroup to a tenant: its namespaces without their own group use it."""
    await deps.write(request, attachments.set_for_tenant, tenant, rg)


@router.delete("/{tenant}/resourcegroup", status_code=204, responses=_READ_ERRORS)
async def remove_tenant_resource_group(request: Request, _: Superuser, tenant: TenantName) -> None:
    """Detach the ResourceGroup from a tenant."""
    await deps.write(request, attachments.set_for_tenant, tenant, None)
