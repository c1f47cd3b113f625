"""One error tree: what any layer raises, and its HTTP status. Every error leaves the server
as Pulsar's ``{"reason": ...}`` body (`app.api.errors`)."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from pydantic import BaseModel, Field

from app.reasons import RESOURCE_GROUP_MISSING


class AppError(Exception):
    """An answer other than success; a subclass that is always raised with the same reason
    says it once, as its ``reason``, and is raised without one."""

    status_code = 500
    #: The answer's headers: a subclass's own for every answer of it, and with them those an
    #: answer is raised with.
    headers: Mapping[str, str] | None = None
    reason = "Internal server error"

    def __init__(
        self, reason: str | None = None, *, headers: Mapping[str, str] | None = None
    ) -> None:
        if reason is not None:
            self.reason = reason
        if headers:
            self.headers = {**(self.headers or {}), **headers}
        super().__init__(self.reason)


class BadRequest(AppError):
    status_code = 400


class Unauthorized(AppError):
    status_code = 401
    headers = MappingProxyType({"WWW-Authenticate": 'Bearer realm="resourcegroups"'})


class Forbidden(AppError):
    status_code = 403


class NotFound(AppError):
    status_code = 404


class Conflict(AppError):
    status_code = 409


class PreconditionFailed(AppError):
    status_code = 412


class PayloadTooLarge(AppError):
    status_code = 413


class UnsupportedMediaType(AppError):
    status_code = 415


class TooManyRequests(AppError):
    status_code = 429


class ServiceUnavailable(AppError):
    status_code = 503


class AuthenticationRequired(Unauthorized):
    reason = "Authentication required: send 'Authorization: Bearer <token>'"


class SuperusersOnly(Forbidden):
    reason = "Only superusers may do this"


class TenantNotFound(NotFound):
    reason = "Tenant does not exist"


class NamespaceNotFound(NotFound):
    reason = "Namespace does not exist"


class ResourceGroupNotFound(NotFound):
    reason = RESOURCE_GROUP_MISSING


class ResourceGroupToAttachNotFound(PreconditionFailed):
    """412, as Pulsar answers an attachment of a group that does not exist (a missing tenant
    or namespace, what the request is about, is the 404)."""

    reason = ResourceGroupNotFound.reason


class ResourceGroupInUse(PreconditionFailed):
    reason = "ResourceGroup is in use"


class TenantHasNamespaces(Conflict):
    reason = "The tenant still has active namespaces"


class ErrorBody(BaseModel):
    reason: str = Field(description="What went wrong, in one sentence.")


def responses(*errors: type[AppError]) -> dict[int | str, dict[str, Any]]:
    """The ``responses=`` entry documenting a route's errors in the OpenAPI document."""
    return {
        error.status_code: {"model": ErrorBody, "description": error.__name__} for error in errors
    }
