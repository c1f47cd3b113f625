"""Injected dependencies: the request's transaction and the caller's role."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy.orm import Session

from app.access import Principal
from app.auth import InvalidToken
from app.db import begin_write
from app.errors import Forbidden, Unauthorized

_READ_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


def get_session(request: Request) -> Iterator[Session]:
    """One request, one transaction: commit on success, roll back on any error.

    Declared with ``scope="function"`` below so the commit runs before the response is sent:
    a failed commit becomes an error response instead of a success that was never stored.
    """
    with request.app.state.sessionmaker() as session:
        try:
            if request.method not in _READ_METHODS:
                begin_write(session)
            yield session
            session.commit()
        except BaseException:
            session.rollback()
            raise


SessionDep = Annotated[Session, Depends(get_session, scope="function")]


bearer_token = HTTPBearer(
    auto_error=False,
    description="A Pulsar-format token: a JWT whose `sub` claim is the role.",
)


async def get_principal(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer_token)],
) -> Principal:
    """The caller's role from a Pulsar-format bearer token (``Authorization: Bearer <jwt>``)."""
    # Async on purpose, like the other auth dependencies: verification is cached CPU work,
    # and a sync dependency would cost a thread-pool hop on every request.
    state = request.app.state
    if not state.settings.auth_enabled:
        return Principal(role="anonymous", is_superuser=True)
    if credentials is None:
        raise Unauthorized("Authentication required: send 'Authorization: Bearer <token>'")
    try:
        role = state.token_verifier.role_of(credentials.credentials)
    except InvalidToken as exc:
        raise Unauthorized(f"Invalid token: {exc.reason}") from exc
    return Principal(role=role, is_superuser=role in state.settings.superusers)


PrincipalDep = Annotated[Principal, Depends(get_principal)]


async def require_superuser(principal: PrincipalDep) -> Principal:
    if not principal.is_superuser:
        raise Forbidden("Only superusers may do this")
    return principal


SuperuserDep = Annotated[Principal, Depends(require_superuser)]
