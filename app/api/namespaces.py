"""``/admin/v2/namespaces``: namespaces, permissions and namespace attachments (tenant admins)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, TypeVar

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


async def as_tenant_admin(
    request: Request,
    principal: access.Principal,
    tenant: str,
    operation: Callable[[deps.Session], T],
    *,
    writes: bool = False,
) -> T:
    """Run `operation` in one transaction, after checking `principal` administers `tenant`."""

    def work(session: deps.Session) -> T:
        access.require_tenant_admin(session, principal, tenant)
        return operation(session)

    return await (deps.write if writes else deps.read)(request, work)


@router.get("/{tenant}", responses=_READ_ERRORS)
async def list_namespaces(
    request: Request, principal: CurrentPrincipal, tenant: TenantName
) -> list[str]:
    """List a tenant's namespaces as ``tenant/namespace``."""
    return await as_tenant_admin(
        request, principal, tenant, lambda session: namespaces.list_names(session, tenant)
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
    cluster = state.settings.cluster_name

    def policies(session: deps.Session) -> NamespacePolicies:
        own = namespaces.get(session, tenant, namespace).resource_group
        return NamespacePolicies(
            auth_policies=AuthPolicies(
                namespace_auth=namespaces.permissions(session, tenant, namespace)
            ),
            replication_clusters=[cluster],
            resource_group_name=own,
        )

    return await as_tenant_admin(request, principal, tenant, policies)


@router.put(
    "/{tenant}/{namespace}",
    status_code=204,
    responses=responses(BadRequest, Unauthorized, Forbidden, NotFound, Conflict),
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
    await as_tenant_admin(
        request,
        principal,
        tenant,
        lambda session: namespaces.create(session, tenant, namespace),
        writes=True,
    )


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

    def remove(session: deps.Session) -> None:
        access.require_delete_keeps_a_group(session, principal, tenant, namespace)
        namespaces.remove(session, tenant, namespace)

    await as_tenant_admin(request, principal, tenant, remove, writes=True)


@router.get("/{tenant}/{namespace}/permissions", responses=_READ_ERRORS)
async def get_permissions(
    request: Request, principal: CurrentPrincipal, tenant: TenantName, namespace: NamespaceName
) -> dict[str, list[str]]:
    """Get the actions each role is granted on a namespace."""
    return await as_tenant_admin(
        request,
        principal,
        tenant,
        lambda session: namespaces.permissions(session, tenant, namespace),
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
    await as_tenant_admin(
        request,
        principal,
        tenant,
        lambda session: namespaces.grant(session, tenant, namespace, role, list(actions)),
        writes=True,
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
    await as_tenant_admin(
        request,
        principal,
        tenant,
        lambda session: namespaces.revoke(session, tenant, namespace, role),
        writes=True,
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

    def work(session: deps.Session) -> AppliedResourceGroup | str | None:
        if not applied:
            return namespaces.get(session, tenant, namespace).resource_group
        return attachments.applied_group(session, tenant, namespace)

    return await as_tenant_admin(request, principal, tenant, work)


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

    def attach(session: deps.Session) -> None:
        access.require_group_used_by_tenant(session, principal, tenant, rg)
        attachments.set_for_namespace(session, tenant, namespace, rg)

    await as_tenant_admin(request, principal, tenant, attach, writes=True)


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

    def detach(session: deps.Session) -> None:
        access.require_detach_keeps_a_group(session, principal, tenant, namespace)
        attachments.set_for_namespace(session, tenant, namespace, None)

    await as_tenant_admin(request, principal, tenant, detach, writes=True)
