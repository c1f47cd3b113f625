"""How errors leave the server: every one as Pulsar's ``{"reason": ...}`` body, from the
app's exception handlers or, before the app runs, straight over ASGI."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from sqlalchemy.exc import DBAPIError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect
from starlette.routing import Match, Route
from starlette.types import Send

from app.errors import AppError
from app.quota.schemas import WATCHED_GROUP_PATTERN, WATCHED_GROUP_RULE
from app.schemas import NAME_PATTERN, NAME_RULE, ROLE_PATTERN, ROLE_RULE
from app.state import state_of
from app.transactions import DATABASE_OUTAGE, is_outage

logger = logging.getLogger(__name__)
# nginx's "client closed request": the client went away before its request was read whole
# (a worker killed mid-report). Nobody reads this answer; metrics and the access log count it.
CLIENT_CLOSED_REQUEST = 499


def _reason_response(
    status_code: int, reason: str, headers: Mapping[str, str] | None = None
) -> JSONResponse:
    return JSONResponse({"reason": reason}, status_code=status_code, headers=headers)


async def send_reason(
    send: Send, status_code: int, reason: str, headers: Mapping[str, str] | None = None
) -> None:
    """Answer with a ``{"reason": ...}`` body straight over ASGI, for middleware that answers
    before the app runs."""
    body = json.dumps({"reason": reason}, separators=(",", ":")).encode()
    raw = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    raw += [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()]
    await send({"type": "http.response.start", "status": status_code, "headers": raw})
    await send({"type": "http.response.body", "body": body})


async def send_error(send: Send, error: AppError, headers: Mapping[str, str] | None = None) -> None:
    """`send_reason` for an error, as the app's handler would answer it, with ``headers``
    added to the error's own."""
    await send_reason(
        send, error.status_code, error.reason, {**(error.headers or {}), **(headers or {})}
    )


def allowed_methods(request: Request) -> list[str]:
    """Every method some route serves at the request's path (the app's routes are listed
    flat in its state's ``routes``).

    Starlette's 405 names only the methods of the first route matching the path, while
    FastAPI makes one route per method: a path served by GET, PUT and DELETE would say
    ``Allow: GET``.
    """
    methods: set[str] = set()
    for route in state_of(request.app).routes:
        if isinstance(route, Route) and route.methods:
            match, _ = route.matches(request.scope)
            if match is not Match.NONE:
                methods |= route.methods
    return sorted(methods)


_BODY_SHAPES = {
    "model_attributes_type": "a JSON object",
    "dict_type": "a JSON object",
    "list_type": "a JSON array",
}
# Said in words rather than as the regular expression.
_PATTERN_RULES = {
    ROLE_PATTERN: f"a role: {ROLE_RULE}",
    NAME_PATTERN: f"a name: {NAME_RULE}",
    WATCHED_GROUP_PATTERN: WATCHED_GROUP_RULE,
}
_PATH_NOUNS = {"rg": "ResourceGroup", "tenant": "tenant", "namespace": "namespace", "role": "role"}


def validation_reason(exc: RequestValidationError) -> str:
    """Name the field and the problem, the way a Pulsar user reads a 400."""
    error = exc.errors()[0]
    location = [str(part) for part in error.get("loc", ())]
    kind = error.get("type", "")
    message = error.get("msg", kind)
    where, field = (location[0], ".".join(location[1:])) if location else ("", "")
    if where == "path":
        noun = _PATH_NOUNS.get(field, field)
        rule = ROLE_RULE if field == "role" else NAME_RULE
        return f"Invalid {noun} name {error.get('input')!r}: must be {rule}"
    described = _PATTERN_RULES.get(str(error.get("ctx", {}).get("pattern")))
    if where != "body":
        parameter = location[1] if len(location) > 1 else field  # not `group.0`
        if kind == "string_pattern_mismatch" and described is not None:
            message = f"{error.get('input')!r} is not {described}"
        return f"Invalid {where} parameter '{parameter}': {message}"
    if kind == "json_invalid":
        return "Request body is not valid JSON"
    if kind == "missing" and not field:
        return "Request body is required"
    if kind == "extra_forbidden":
        return f"Unknown field '{field}'"
    if kind == "string_pattern_mismatch" and field and described is not None:
        return f"Invalid value for '{field}': {error.get('input')!r} is not {described}"
    if not field:
        expected = _BODY_SHAPES.get(kind)
        return f"Request body must be {expected}" if expected else f"Request body: {message}"
    return f"Invalid value for '{field}': {message}"


def register_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(AppError)
    async def app_error(_request: Request, exc: AppError) -> JSONResponse:
        return _reason_response(exc.status_code, exc.reason, exc.headers)

    @app.exception_handler(RequestValidationError)
    async def validation_error(_request: Request, exc: RequestValidationError) -> JSONResponse:
        return _reason_response(400, validation_reason(exc))

    @app.exception_handler(ClientDisconnect)
    async def client_gone(_request: Request, _exc: ClientDisconnect) -> Response:
        return Response(status_code=CLIENT_CLOSED_REQUEST)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> Response:
        if isinstance(exc.__cause__, ClientDisconnect):  # FastAPI's "error parsing the body"
            return Response(status_code=CLIENT_CLOSED_REQUEST)
        headers = exc.headers
        allowed = allowed_methods(request) if exc.status_code == 405 else None
        if allowed:
            headers = {**(headers or {}), "Allow": ", ".join(allowed)}
        return _reason_response(exc.status_code, str(exc.detail), headers)

    @app.exception_handler(DBAPIError)
    async def database_error(request: Request, exc: DBAPIError) -> JSONResponse:
        state_of(request.app).metrics.database_errors.labels(type(exc).__name__).inc()
        if is_outage(exc):
            DATABASE_OUTAGE.failed(exc.orig)
            return _reason_response(503, "Database unavailable")
        logger.exception("database error")
        return _reason_response(500, "Internal database error")
