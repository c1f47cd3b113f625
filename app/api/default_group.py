"""``/admin/v2/default-resourcegroup``: the group of namespaces without one (superusers).

Kafka's default quota entity: with a default set, every namespace is under some group, its
own, its tenant's or the default, and a new namespace is limited from its first report.
"""

from __future__ import annotations

from fastapi import APIRouter, Request

from app.api import deps
from app.api.deps import Superuser
from app.errors import BadRequest, Forbidden, PreconditionFailed, Unauthorized, responses
from app.schemas import ResourceGroupName
from app.services import attachments

router = APIRouter(prefix="/admin/v2/default-resourcegroup", tags=["default-resourcegroup"])

_ERRORS = responses(Unauthorized, Forbidden)


@router.get("", responses=_ERRORS)
async def get_default_resource_group(request: Request, _: Superuser) -> str | None:
    """Get the name of the default ResourceGroup, or null if there is none."""
    return await deps.read(request, attachments.get_default)


@router.post(
    "/{rg}",
    status_code=204,
    responses=responses(BadRequest, Unauthorized, Forbidden, PreconditionFailed),
)
async def set_default_resource_group(request: Request, _: Superuser, rg: ResourceGroupName) -> None:
    """Make a ResourceGroup the group of every namespace without its own or its tenant's."""
    await deps.write(request, attachments.set_default, rg)


@router.delete("", status_code=204, responses=_ERRORS)
async def remove_default_resource_group(request: Request, _: Superuser) -> None:
    """Remove the default ResourceGroup: the namespaces it covered become unlimited."""
    await deps.write(request, attachments.set_default, None)
