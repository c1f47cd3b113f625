"""``/admin/v2/tenants``: tenants and the ResourceGroup attached to a whole tenant."""

from __future__ import annotations

from fastapi import APIRouter

from app import access
from app.api.deps import PrincipalDep, SessionDep, SuperuserDep
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


@router.get("", responses=responses(Unauthorized, Forbidden))
def list_tenants(*, session: SessionDep, _superuser: SuperuserDep) -> list[str]:
    """List the names of all tenants."""
    return tenants.list_names(session)


@router.get("/{tenant}", responses=responses(BadRequest, Unauthorized, Forbidden, NotFound))
def get_tenant(*, session: SessionDep, principal: PrincipalDep, tenant: TenantName) -> TenantInfo:
    """Get a tenant's admin roles and allowed clusters."""
    access.require_tenant_admin(session, principal, tenant)
    found = tenants.get(session, tenant)
    return TenantInfo(adminRoles=found.admin_roles, allowedClusters=found.allowed_clusters)


@router.put(
    "/{tenant}", status_code=204, responses=responses(BadRequest, Unauthorized, Forbidden, Conflict)
)
def create_tenant(
    *, session: SessionDep, _superuser: SuperuserDep, tenant: TenantName, body: TenantInfo
) -> None:
    """Create a tenant."""
    tenants.create(session, tenant, body)


@router.post(
    "/{tenant}", status_code=204, responses=responses(BadRequest, Unauthorized, Forbidden, NotFound)
)
def update_tenant(
    *, session: SessionDep, _superuser: SuperuserDep, tenant: TenantName, body: TenantInfo
) -> None:
    """Replace a tenant's admin roles and allowed clusters."""
    tenants.update_info(session, tenant, body)


@router.delete(
    "/{tenant}",
    status_code=204,
    responses=responses(BadRequest, Unauthorized, Forbidden, NotFound, Conflict),
)
def delete_tenant(*, session: SessionDep, _superuser: SuperuserDep, tenant: TenantName) -> None:
    """Delete a tenant that has no namespaces."""
    tenants.remove(session, tenant)


@router.get(
    "/{tenant}/resourcegroup", responses=responses(BadRequest, Unauthorized, Forbidden, NotFound)
)
def get_tenant_resource_group(
    *, session: SessionDep, principal: PrincipalDep, tenant: TenantName
) -> str | None:
    """Get the name of the ResourceGroup attached to a tenant, or null."""
    access.require_tenant_admin(session, principal, tenant)
    return tenants.get(session, tenant).resource_group


@router.post(
    "/{tenant}/resourcegroup/{rg}",
    status_code=204,
    responses=responses(BadRequest, Unauthorized, Forbidden, NotFound, PreconditionFailed),
)
def set_tenant_resource_group(
    *, session: SessionDep, _superuser: SuperuserDep, tenant: TenantName, rg: ResourceGroupName
) -> None:
    """Attach a ResourceGroup to a tenant: its namespaces without their own group use it."""
    attachments.set_for_tenant(session, tenant, rg)


@router.delete(
    "/{tenant}/resourcegroup",
    status_code=204,
    responses=responses(BadRequest, Unauthorized, Forbidden, NotFound),
)
def remove_tenant_resource_group(
    *, session: SessionDep, _superuser: SuperuserDep, tenant: TenantName
) -> None:
    """Detach the ResourceGroup from a tenant."""
    attachments.set_for_tenant(session, tenant, None)
