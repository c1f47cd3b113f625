"""What endpoints take as dependencies: the caller, and their database work run as one
transaction in one trip to the thread pool (`app.transactions`, which retries collisions).

The caller is authenticated before routing (`app.api.authentication`); endpoints say whom
they serve by taking ``principal: CurrentPrincipal`` (any authenticated role) or
``_: Superuser`` (superusers only: 403 for anyone else).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Concatenate, ParamSpec, TypeVar

from fastapi import Depends, Request
from fastapi.routing import APIRoute
from sqlalchemy.orm import Session

from app.access import Principal
from app.errors import SuperusersOnly
from app.state import AppState, state_of
from app.transactions import WriteConflict, looking, transaction

__all__ = [
    "CurrentPrincipal",
    "Session",
    "StateDep",
    "Superuser",
    "WriteConflict",
    "read",
    "requires_superuser",
    "write",
]

T = TypeVar("T")
P = ParamSpec("P")


# Async, as every dependency here: FastAPI runs a plain function's in the thread pool.
async def current_state(request: Request) -> AppState:
    return state_of(request.app)


StateDep = Annotated[AppState, Depends(current_state)]


async def current_principal(request: Request) -> Principal:
    principal: Principal = request.scope["principal"]
    return principal


CurrentPrincipal = Annotated[Principal, Depends(current_principal)]


async def require_superuser(principal: CurrentPrincipal) -> Principal:
    if not principal.is_superuser:
        raise SuperusersOnly
    return principal


Superuser = Annotated[Principal, Depends(require_superuser)]


def requires_superuser(route: APIRoute) -> bool:
    """Whether the route serves superusers only (it takes a `Superuser`)."""
    return any(dependency.call is require_superuser for dependency in route.dependant.dependencies)


# Shaped as Starlette's run_in_threadpool(func, *args, **kwargs): the session opened here is
# passed to `func` first.


async def read(
    request: Request,
    func: Callable[Concatenate[Session, P], T],
    /,
    *args: P.args,
    **kwargs: P.kwargs,
) -> T:
    """Run ``func(session, *args, **kwargs)`` in the thread pool and return what it returns."""
    return await looking(state_of(request.app).sessions, func, *args, **kwargs)


async def write(
    request: Request,
    func: Callable[Concatenate[Session, P], T],
    /,
    *args: P.args,
    **kwargs: P.kwargs,
) -> T:
    """Run ``func(session, *args, **kwargs)`` as one transaction: committed if it returns,
    rolled back if not."""
    return await transaction(state_of(request.app).sessions, func, *args, **kwargs)
