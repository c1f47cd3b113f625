"""``/admin/v2/resourcegroups``: rate quotas (superusers; tenant admins may read their own)."""

from __future__ import annotations

from fastapi import APIRouter

from app import access
from app.api.deps import PrincipalDep, SessionDep, SuperuserDep
from app.errors import BadRequest, Forbidden, NotFound, PreconditionFailed, Unauthorized, responses
from app.schemas import ResourceGroupName, ResourceGroupRead, ResourceGroupUpdate
from app.services import resourcegroups
from app.services.resourcegroups import to_read

router = APIRouter(prefix="/admin/v2/resourcegroups", tags=["resourcegroups"])


@router.get("", responses=responses(Unauthorized, Forbidden))
def list_resource_groups(*, session: SessionDep, _superuser: SuperuserDep) -> list[str]:
    """List the names of all ResourceGroups."""
    return resourcegroups.list_names(session)


@router.get("/{rg}", responses=responses(BadRequest, Unauthorized, Forbidden, NotFound))
def get_resource_group(
    *, session: SessionDep, principal: PrincipalDep, rg: ResourceGroupName
) -> ResourceGroupRead:
    """Get a ResourceGroup's rate quotas."""
    access.require_group_reader(session, principal, rg)
    return to_read(resourcegroups.get(session, rg))


@router.put("/{rg}", status_code=204, responses=responses(BadRequest, Unauthorized, Forbidden))
def put_resource_group(
    *,
    session: SessionDep,
    _superuser: SuperuserDep,
    rg: ResourceGroupName,
    body: ResourceGroupUpdate,
) -> None:
    """Create a ResourceGroup, or update the fields given (omitted fields keep their value)."""
    resourcegroups.upsert(session, rg, body)


@router.delete(
    "/{rg}",
    status_code=204,
    responses=responses(BadRequest, Unauthorized, Forbidden, NotFound, PreconditionFailed),
)
def delete_resource_group(
    *, session: SessionDep, _superuser: SuperuserDep, rg: ResourceGroupName
) -> None:
    """Delete a ResourceGroup that no tenant or namespace uses."""
    resourcegroups.remove(session, rg)
