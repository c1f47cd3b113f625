"""Token authentication for every ``/admin`` and ``/quota`` request, as one ASGI middleware.

A middleware rather than a FastAPI dependency: it runs once per request for a few
microseconds, answers 401 before routing (like Pulsar's authentication filter), and hands
the endpoints a `Principal` in the request scope.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from fastapi import FastAPI, Request
from starlette.types import ASGIApp, Receive, Scope, Send

from app.access import Principal
from app.auth import InvalidToken, TokenVerifier
from app.errors import Forbidden, Unauthorized

PROTECTED_PREFIXES = ("/admin/", "/quota/", "/ui/api/")
SCHEME = "bearerAuth"
_ANONYMOUS = Principal(role="anonymous", is_superuser=True)


class TokenAuthMiddleware:
    def __init__(
        self, app: ASGIApp, *, verifier: TokenVerifier | None, superusers: frozenset[str]
    ) -> None:
        self.app = app
        self.verifier = verifier
        self.superusers = superusers

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"].startswith(PROTECTED_PREFIXES):
            try:
                scope["principal"] = self.authenticate(scope)
            except Unauthorized as exc:
                await _send_error(send, exc)
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


async def _send_error(send: Send, error: Unauthorized) -> None:
    body = json.dumps({"reason": error.reason}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    headers += [(k.lower().encode(), v.encode()) for k, v in (error.headers or {}).items()]
    await send({"type": "http.response.start", "status": error.status_code, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def principal_of(request: Request) -> Principal:
    principal: Principal = request.scope["principal"]
    return principal


def superuser_of(request: Request) -> Principal:
    principal = principal_of(request)
    if not principal.is_superuser:
        raise Forbidden("Only superusers may do this")
    return principal


def document_security(
    app: FastAPI, schemas: dict[str, Any] | None = None
) -> Callable[[], dict[str, Any]]:
    """The app's OpenAPI builder, with bearer auth declared on every protected operation, and
    ``schemas`` (those of bodies that routes validate themselves) among the components."""
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
            app.openapi_schema = schema
        return app.openapi_schema

    return openapi
