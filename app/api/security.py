"""Token authentication for every ``/admin`` and ``/quota`` request, as one ASGI middleware.

A middleware rather than a FastAPI dependency: it runs once per request for a few
microseconds, answers 401 before routing (like Pulsar's authentication filter), and hands
the endpoints a `Principal` in the request scope.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from fastapi import FastAPI, Request
from starlette.types import ASGIApp, Receive, Scope, Send

from app.access import Principal
from app.api import spec
from app.auth import InvalidToken, TokenVerifier
from app.errors import Forbidden, Unauthorized, send_reason

PROTECTED_PREFIXES = ("/admin/", "/quota/", "/ui/api/")
SCHEME = "bearerAuth"
_ANONYMOUS = Principal(role="anonymous", is_superuser=True)


class TokenAuthMiddleware:
    def __init__(
        self,
        app: ASGIApp,
        *,
        verifier: TokenVerifier | None,
        superusers: frozenset[str],
        protected_paths: frozenset[str] = frozenset(),
    ) -> None:
        self.app = app
        self.verifier = verifier
        self.superusers = superusers
        self.protected_paths = protected_paths  # besides the prefixes, e.g. /metrics on request

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and (
            scope["path"].startswith(PROTECTED_PREFIXES) or scope["path"] in self.protected_paths
        ):
            try:
                scope["principal"] = self.authenticate(scope)
            except Unauthorized as exc:
                await send_reason(send, exc.status_code, exc.reason, exc.headers)
                return
        await self.app(scope, receive, send)

    def authenticate(self, scope: Scope) -> Principal:
        if self.verifier is None:  # authentication disabled: everyone is a superuser
            return _ANONYMOUS
        header = next((value for name, value in scope["headers"] if name == b"authorization"), b"")
        scheme, _, token = header.decode("latin-1").partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            raise Unauthorized("Authentication required: send 'Authorization: Bearer <token>'")
        try:
            role = self.verifier.role_of(token)
        except InvalidToken as exc:
            raise Unauthorized(f"Invalid token: {exc.reason}") from exc
        return Principal(role=role, is_superuser=role in self.superusers)


def principal_of(request: Request) -> Principal:
    principal: Principal = request.scope["principal"]
    return principal


SUPERUSERS_ONLY = "Only superusers may do this"


def superuser_of(request: Request) -> Principal:
    principal = principal_of(request)
    if not principal.is_superuser:
        raise Forbidden(SUPERUSERS_ONLY)
    return principal


Endpoint = TypeVar("Endpoint", bound=Callable[..., Any])
_SUPERUSER_ENDPOINTS: set[Callable[..., Any]] = set()


def superusers_only(endpoint: Endpoint) -> Endpoint:
    """Mark an endpoint that takes a body and calls `superuser_of` first: the request limits
    then answer other roles' requests 403 before reading the body."""
    _SUPERUSER_ENDPOINTS.add(endpoint)
    return endpoint


def is_superusers_only(endpoint: Callable[..., Any]) -> bool:
    return endpoint in _SUPERUSER_ENDPOINTS


def document_security(
    app: FastAPI, schemas: dict[str, Any] | None = None
) -> Callable[[], dict[str, Any]]:
    """The app's OpenAPI builder, with bearer auth declared on every protected operation,
    ``schemas`` (those of bodies that routes validate themselves) among the components, and
    tidied for generated clients (`spec.tidy`)."""
    build = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = build()
            components = schema.setdefault("components", {})
            components["schemas"] = dict(
                sorted({**components["schemas"], **(schemas or {})}.items())
            )
            components["securitySchemes"] = {
                SCHEME: {
                    "type": "http",
                    "scheme": "bearer",
                    "bearerFormat": "JWT",
                    "description": "A Pulsar-format token: a JWT whose `sub` claim is the role.",
                }
            }
            for path, operations in schema["paths"].items():
                if path.startswith(PROTECTED_PREFIXES):
                    for operation in operations.values():
                        operation["security"] = [{SCHEME: []}]
            app.openapi_schema = spec.tidy(schema)
        return app.openapi_schema

    return openapi
