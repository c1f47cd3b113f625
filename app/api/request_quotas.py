"""``/admin/v2/request-quotas``: requests per second per role (superusers only).

Kafka's request quotas (KIP-124): a default for every role and overrides per role, changed at
runtime. Roles live in tokens, so a quota may name a role no token has used yet.
"""

from __future__ import annotations

from fastapi import APIRouter, Request

from app.api import deps
from app.api.deps import StateDep, Superuser
from app.errors import BadRequest, Forbidden, NotFound, Unauthorized, responses
from app.schemas import RequestQuotaBody, RequestQuotasRead, RoleName
from app.services import request_quotas
from app.services.request_quotas import DEFAULT
from app.state import AppState

router = APIRouter(prefix="/admin/v2/request-quotas", tags=["request-quotas"])

_ERRORS = responses(BadRequest, Unauthorized, Forbidden, NotFound)


@router.get("", responses=responses(Unauthorized, Forbidden))
async def get_request_quotas(request: Request, _: Superuser) -> RequestQuotasRead:
    """Get the default request quota and the quotas per role."""
    default, roles = await deps.read(request, request_quotas.load)
    return RequestQuotasRead(default=default, roles=roles)


@router.put("/default", status_code=204, responses=_ERRORS)
async def set_default_request_quota(
    request: Request, _: Superuser, state: StateDep, body: RequestQuotaBody
) -> None:
    """Set the request quota of every role without its own."""
    await _put(request, state, DEFAULT, body)


@router.delete("/default", status_code=204, responses=_ERRORS)
async def remove_default_request_quota(request: Request, _: Superuser, state: StateDep) -> None:
    """Remove the default request quota: roles without their own are no longer limited."""
    await _remove(request, state, DEFAULT)


@router.put("/roles/{role}", status_code=204, responses=_ERRORS)
async def set_role_request_quota(
    request: Request, _: Superuser, state: StateDep, role: RoleName, body: RequestQuotaBody
) -> None:
    """Set a role's request quota, overriding the default."""
    await _put(request, state, role, body)


@router.delete("/roles/{role}", status_code=204, responses=_ERRORS)
async def remove_role_request_quota(
    request: Request, _: Superuser, state: StateDep, role: RoleName
) -> None:
    """Remove a role's own request quota: the default applies to it again."""
    await _remove(request, state, role)


async def _put(request: Request, state: AppState, role: str, body: RequestQuotaBody) -> None:
    await deps.write(request, request_quotas.put, role, body.requestsPerSecond)
    state.request_throttle.expire()


async def _remove(request: Request, state: AppState, role: str) -> None:
    await deps.write(request, request_quotas.remove, role)
    state.request_throttle.expire()
