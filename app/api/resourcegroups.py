"""``/admin/v2/resourcegroups``: rate quotas (superusers; tenant admins may read their own)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request

from app import access
from app.access import Principal
from app.api import deps
from app.api.deps import CurrentPrincipal, StateDep, Superuser
from app.errors import (
    BadRequest,
    Forbidden,
    NotFound,
    PreconditionFailed,
    ResourceGroupNotFound,
    Unauthorized,
    responses,
)
from app.quota import history
from app.readcache import load_entry
from app.schemas import (
    ResourceGroupMode,
    ResourceGroupName,
    ResourceGroupRead,
    ResourceGroupUpdate,
    UsageHistory,
)
from app.services import resourcegroups
from app.state import AppState

router = APIRouter(prefix="/admin/v2/resourcegroups", tags=["resourcegroups"])


@router.get("", responses=responses(Unauthorized, Forbidden))
async def list_resource_groups(request: Request, _: Superuser) -> list[str]:
    """List the names of all ResourceGroups."""
    return await deps.read(request, resourcegroups.list_names)


@router.get("/{rg}", responses=responses(BadRequest, Unauthorized, Forbidden, NotFound))
async def get_resource_group(
    request: Request, principal: CurrentPrincipal, state: StateDep, rg: ResourceGroupName
) -> ResourceGroupRead:
    """Get a ResourceGroup's rate quotas."""
    cache = state.group_cache
    entry, token = await cache.lookup(rg)
    if entry is None:
        entry = await deps.read(request, load_entry, rg)
        cache.put(rg, entry, token)
    access.require_group_reader(principal, entry.readers)
    if entry.group is None:
        raise ResourceGroupNotFound
    return entry.group


@router.put("/{rg}", status_code=204, responses=responses(BadRequest, Unauthorized, Forbidden))
async def put_resource_group(
    request: Request, _: Superuser, rg: ResourceGroupName, body: ResourceGroupUpdate
) -> None:
    """Create a ResourceGroup, or update the fields given (omitted fields keep their value)."""
    await deps.write(request, resourcegroups.upsert, rg, body)


@router.delete(
    "/{rg}",
    status_code=204,
    responses=responses(BadRequest, Unauthorized, Forbidden, NotFound, PreconditionFailed),
)
async def delete_resource_group(request: Request, _: Superuser, rg: ResourceGroupName) -> None:
    """Delete a ResourceGroup that no tenant or namespace uses and that is not the default."""
    await deps.write(request, resourcegroups.remove, rg)


@router.get("/{rg}/mode", responses=responses(BadRequest, Unauthorized, Forbidden, NotFound))
async def get_resource_group_mode(
    request: Request, principal: CurrentPrincipal, rg: ResourceGroupName
) -> ResourceGroupMode:
    """Get whether a ResourceGroup's workers hold back (`enforce`) or only record what
    holding back would do (`observe`). Apart from the group's object, which stays Pulsar's."""
    return await deps.read(request, _mode, principal, rg)


def _mode(session: deps.Session, principal: Principal, rg: str) -> ResourceGroupMode:
    access.require_group_reader(principal, resourcegroups.readers(session, rg))
    return resourcegroups.get_mode(session, rg)


@router.put(
    "/{rg}/mode",
    status_code=204,
    responses=responses(BadRequest, Unauthorized, Forbidden, NotFound),
)
async def put_resource_group_mode(
    request: Request, _: Superuser, rg: ResourceGroupName, body: ResourceGroupMode
) -> None:
    """Switch an existing ResourceGroup between `enforce` and `observe`: its workers follow
    within a second (the change is pushed to them). A PUT of the group itself keeps it."""
    await deps.write(request, resourcegroups.set_mode, rg, body.mode)


@router.get("/{rg}/usage", responses=responses(BadRequest, Unauthorized, Forbidden, NotFound))
async def get_resource_group_usage(
    request: Request,
    principal: CurrentPrincipal,
    state: StateDep,
    rg: ResourceGroupName,
    since: Annotated[
        float,
        Query(gt=0, description="Seconds of history, back from now (at most the retention)."),
    ] = 900,
) -> UsageHistory:
    """Get a ResourceGroup's usage, demand and allocation over time, and its namespaces."""
    return await deps.read(request, _usage, principal, state, rg, since)


def _usage(
    session: deps.Session, principal: Principal, state: AppState, rg: str, since: float
) -> UsageHistory:
    access.require_group_reader(principal, resourcegroups.readers(session, rg))
    resourcegroups.get(session, rg)
    return history.read(session, rg, since, state.clock(), state.settings)
