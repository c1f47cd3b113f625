"""``/admin/v2/namespaces``: namespaces, permissions and namespace attachments (tenant admins)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, Concatenate, ParamSpec, TypeVar

from fastapi import APIRouter, Body, Query, Request

from app import access
from app.api import deps
from app.api.deps import CurrentPrincipal, StateDep
from app.errors import (
    BadRequest,
    Conflict,
    ErrorBody,
    Forbidden,
    NotFound,
    PreconditionFailed,
    Unauthorized,
    responses,
)
from app.schemas import (
    AppliedResourceGroup,
    AuthAction,
    AuthPolicies,
    NamespaceName,
    NamespacePolicies,
    ResourceGroupName,
    RoleName,
    TenantName,
)
from app.services import attachments, namespaces

router = APIRouter(prefix="/admin/v2/namespaces", tags=["namespaces"])

_READ_ERRORS = responses(BadRequest, Unauthorized, Forbidden, NotFound)


def _forbidden(lifting: str) -> dict[int | str, dict[str, Any]]:
    """A 403 that documents the tenant-admin rule: a tenant admin never lifts a quota."""
    return {
        Forbidden.status_code: {
            "model": ErrorBody,
            "description": "Forbidden: not an admin of the tenant; or a tenant admin (not a "
            f"superuser) {lifting}.",
        }
    }


T = TypeVar("T")
P = ParamSpec("P")


def as_tenant_admin(
    session: deps.Session,
    principal: access.Principal,
    tenant: str,
    func: Callable[Concatenate[deps.Session, P], T],
    /,
    *args: P.args,
    **kwargs: P.kwargs,
) -> T:
    """``func(session, *args, **kwargs)``, once `principal` is found to administer `tenant`
    (in the same transaction)."""
    access.require_tenant_admin(session, principal, tenant)
    return func(session, *args, **kwargs)


@router.get("/{tenant}", responses=_READ_ERRORS)
async def list_namespaces(
    request: Request, principal: CurrentPrincipal, tenant: TenantName
) -> list[str]:
    """List a tenant's namespaces as ``tenant/namespace``."""
    return await deps.read(
        request, as_tenant_admin, principal, tenant, namespaces.list_names, tenant
    )


@router.get("/{tenant}/{namespace}", responses=_READ_ERRORS)
async def get_namespace_policies(
    request: Request,
    principal: CurrentPrincipal,
    state: StateDep,
    tenant: TenantName,
    namespace: NamespaceName,
) -> NamespacePolicies:
    """Get a namespace's policies: its permissions, cluster and ResourceGroup, as Pulsar's."""
    return await deps.read(
        request,
        as_tenant_admin,
        principal,
        tenant,
        _policies,
        tenant,
        namespace,
        state.settings.cluster_name,
    )


def _policies(
    session: deps.Session, tenant: str, namespace: str, cluster: str
) -> NamespacePolicies:
    own = namespaces.get(session, tenant, namespace).resource_group
    return NamespacePolicies(
        auth_policies=AuthPolicies(
            namespace_auth=namespaces.permissions(session, tenant, namespace)
        ),
        replication_clusters=[cluster],
        resource_group_name=own,
    )


@router.put(
    "/{tenant}/{namespace}",
    status_code=204,
    responses=responses(BadRequest, Unauthorized, NotFound, Conflict)
    | _forbidden(
        "creating a namespace that no group would cover (its tenant has none, there is no "
        "default) while other namespaces of its tenant have a group of their own"
    ),
)
async def create_namespace(
    request: Request,
    principal: CurrentPrincipal,
    tenant: TenantName,
    namespace: NamespaceName,
    policies: Annotated[
        dict[str, Any] | None,
        Body(description="Pulsar namespace policies; accepted for compatibility and not stored."),
    ] = None,
) -> None:
    """Create a namespace in a tenant."""
    await deps.write(
        request, as_tenant_admin, principal, tenant, _create, principal, tenant, namespace
    )


def _create(
    session: deps.Session, principal: access.Principal, tenant: str, namespace: str
) -> None:
    access.require_create_is_covered(session, principal, tenant)
    namespaces.create(session, tenant, namespace)


@router.delete(
    "/{tenant}/{namespace}",
    status_code=204,
    responses=_READ_ERRORS
    | _forbidden(
        "deleting a namespace with a ResourceGroup of its own that neither its tenant's nor the "
        "default group would cover if it were created again"
    ),
)
async def delete_namespace(
    request: Request, principal: CurrentPrincipal, tenant: TenantName, namespace: NamespaceName
) -> None:
    """Delete a namespace, with its permissions and attachment."""
    await deps.write(
        request, as_tenant_admin, principal, tenant, _remove, principal, tenant, namespace
    )


def _remove(
    session: deps.Session, principal: access.Principal, tenant: str, namespace: str
) -> None:
    access.require_delete_keeps_a_group(session, principal, tenant, namespace)
    namespaces.remove(session, tenant, namespace)


@router.get("/{tenant}/{namespace}/permissions", responses=_READ_ERRORS)
async def get_permissions(
    request: Request, principal: CurrentPrincipal, tenant: TenantName, namespace: NamespaceName
) -> dict[str, list[str]]:
    """Get the actions each role is granted on a namespace."""
    return await deps.read(
        request,
        as_tenant_admin,
        principal,
        tenant,
        namespaces.permissions,
        tenant,
        namespace,
    )


@router.post("/{tenant}/{namespace}/permissions/{role}", status_code=204, responses=_READ_ERRORS)
async def grant_permission(
    request: Request,
    principal: CurrentPrincipal,
    tenant: TenantName,
    namespace: NamespaceName,
    role: RoleName,
    actions: Annotated[
        list[AuthAction],
        Body(description='Actions to grant, replacing the current ones: ["produce", "consume"]'),
    ],
) -> None:
    """Grant a role actions on a namespace; ``produce``/``consume`` let its jobs report usage."""
    await deps.write(
        request,
        as_tenant_admin,
        principal,
        tenant,
        namespaces.grant,
        tenant,
        namespace,
        role,
        actions,
    )


@router.delete("/{tenant}/{namespace}/permissions/{role}", status_code=204, responses=_READ_ERRORS)
async def revoke_permission(
    request: Request,
    principal: CurrentPrincipal,
    tenant: TenantName,
    namespace: NamespaceName,
    role: RoleName,
) -> None:
    """Revoke all of a role's actions on a namespace."""
    await deps.write(
        request,
        as_tenant_admin,
        principal,
        tenant,
        namespaces.revoke,
        tenant,
        namespace,
        role,
    )


@router.get(
    "/{tenant}/{namespace}/resourcegroup",
    responses={
        200: {
            "description": "Without `applied`: the name of the namespace's own ResourceGroup, "
            "or null. With `applied=true`: an `AppliedResourceGroup` object."
        },
        **_READ_ERRORS,
    },
)
async def get_namespace_resource_group(
    request: Request,
    principal: CurrentPrincipal,
    tenant: TenantName,
    namespace: NamespaceName,
    applied: Annotated[
        bool,
        Query(
            description="Answer with the group that applies (the namespace's own, else its "
            "tenant's, else the default) and where it comes from, instead of the namespace's "
            "own attachment."
        ),
    ] = False,
) -> AppliedResourceGroup | str | None:
    """Get the namespace's own ResourceGroup, or with ``applied=true`` the one that applies."""
    return await deps.read(
        request, as_tenant_admin, principal, tenant, _resource_group, tenant, namespace, applied
    )


def _resource_group(
    session: deps.Session, tenant: str, namespace: str, applied: bool
) -> AppliedResourceGroup | str | None:
    if not applied:
        return namespaces.get(session, tenant, namespace).resource_group
    return attachments.applied_group(session, tenant, namespace)


@router.post(
    "/{tenant}/{namespace}/resourcegroup/{rg}",
    status_code=204,
    responses=responses(BadRequest, Unauthorized, Forbidden, NotFound, PreconditionFailed)
    | _forbidden(
        "attaching a group its tenant does not use: attached to the tenant or to one of its "
        "namespaces, or the default group while some of its namespaces fall under it"
    ),
)
async def set_namespace_resource_group(
    request: Request,
    principal: CurrentPrincipal,
    tenant: TenantName,
    namespace: NamespaceName,
    rg: ResourceGroupName,
) -> None:
    """Attach a ResourceGroup to a namespace; it takes precedence over the tenant's."""
    await deps.write(
        request, as_tenant_admin, principal, tenant, _attach, principal, tenant, namespace, rg
    )


def _attach(
    session: deps.Session, principal: access.Principal, tenant: str, namespace: str, rg: str
) -> None:
    access.require_group_used_by_tenant(session, principal, tenant, rg)
    attachments.set_for_namespace(session, tenant, namespace, rg)


@router.delete(
    "/{tenant}/{namespace}/resourcegroup",
    status_code=204,
    responses=_READ_ERRORS
    | _forbidden(
        "detaching a namespace's group when neither its tenant's nor the default group would "
        "then apply"
    ),
)
async def remove_namespace_resource_group(
    request: Request, principal: CurrentPrincipal, tenant: TenantName, namespace: NamespaceName
) -> None:
    """Detach the ResourceGroup from a namespace (its tenant's, else the default, then applies)."""
    await deps.write(
        request, as_tenant_admin, principal, tenant, _detach, principal, tenant, namespace
    )


def _detach(
    session: deps.Session, principal: access.Principal, tenant: str, namespace: str
) -> None:
    access.require_detach_keeps_a_group(session, principal, tenant, namespace)
    attachments.set_for_namespace(session, tenant, namespace, None)
