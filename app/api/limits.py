"""Limits on what one request may make a server process hold or wait for, as one ASGI middleware.

Checked in this order, each before anything is parsed:

- 431 for too many header lines or too many header bytes;
- for a request with a body (a ``Content-Length`` above 0, or chunked): 403 when its route is
  for superusers only and the caller is not one, before a byte of the body is read; 413 when
  its ``Content-Length`` is over the route's limit; 415 when its route takes JSON and the
  ``Content-Type`` is not JSON (or is missing);
- while the body is read: 413 as soon as the bytes received pass the limit (a chunked body
  announces no length), 408 when the whole body has not arrived within the timeout.

The app reads the body through this middleware, which counts each chunk as it arrives: at
most the limit (and one chunk) is ever held. The server (uvicorn) pauses reading the socket
while a chunk waits, so nothing piles up below either.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass

from fastapi import HTTPException
from fastapi.routing import APIRoute
from starlette.routing import BaseRoute
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.access import Principal
from app.api.deps import requires_superuser
from app.api.errors import send_error, send_reason
from app.config import Settings
from app.errors import AppError, PayloadTooLarge, SuperusersOnly, UnsupportedMediaType

# Past a limit the rest of the body is not read, so the connection cannot carry another
# request: uvicorn closes it after a response that says so.
_CLOSE = {"Connection": "close"}


@dataclass(frozen=True, slots=True)
class RequestLimits:
    max_body_bytes: int
    body_timeout_s: float
    max_headers: int
    max_header_bytes: int
    #: Route names whose bodies may be larger than `max_body_bytes`, with their own limits.
    large_bodies: Mapping[str, int]

    @classmethod
    def from_settings(cls, settings: Settings, large_body_routes: Iterable[str]) -> RequestLimits:
        return cls(
            max_body_bytes=settings.max_body_bytes,
            body_timeout_s=settings.body_timeout_seconds,
            max_headers=settings.max_request_headers,
            max_header_bytes=settings.max_header_bytes,
            large_bodies=dict.fromkeys(large_body_routes, settings.max_report_body_bytes),
        )


@dataclass(frozen=True, slots=True)
class _BodyRule:
    limit: int
    takes_json: bool
    superusers_only: bool


# A route's static prefix, path pattern, methods and rule.
_IndexEntry = tuple[str, re.Pattern[str], Collection[str], _BodyRule]


class BodyRejected(HTTPException):
    """Raised from ``receive``: FastAPI passes HTTP exceptions met while reading a body on to
    the app's error handlers, which answer with a ``{"reason": ...}`` body."""

    def __init__(self, status_code: int, reason: str) -> None:
        super().__init__(status_code, reason, headers=_CLOSE)


class RequestLimitsMiddleware:
    def __init__(
        self,
        app: ASGIApp,
        *,
        limits: RequestLimits,
        routes: Callable[[], Iterable[BaseRoute]],
    ) -> None:
        self.app = app
        self.limits = limits
        # The app's routes, read when first needed: they are added after the middleware.
        self.routes = routes
        self._routes_index: list[_IndexEntry] | None = None
        self._default = _BodyRule(limits.max_body_bytes, takes_json=False, superusers_only=False)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limits = self.limits
        headers: list[tuple[bytes, bytes]] = scope["headers"]
        if len(headers) > limits.max_headers:
            await send_reason(
                send, 431, f"Too many request headers: at most {limits.max_headers}", _CLOSE
            )
            return
        length: int | None = None
        chunked = False
        content_type = b""
        size = 0
        for name, value in headers:
            size += len(name) + len(value)
            if name == b"content-length":
                length = _content_length(value)
            elif name == b"transfer-encoding":
                chunked = True
            elif name == b"content-type":
                content_type = value
        if size > limits.max_header_bytes:
            await send_reason(
                send,
                431,
                f"Request headers too large: at most {limits.max_header_bytes} bytes",
                _CLOSE,
            )
            return
        if not chunked and not length:  # no body: nothing to limit
            await self.app(scope, receive, send)
            return
        rule = self._rule_for(scope)
        problem = _refusal(rule, scope.get("principal"), length, content_type)
        if problem is not None:
            await send_error(send, problem, _CLOSE)
            return
        await self._limited(scope, receive, send, rule.limit)

    async def _limited(self, scope: Scope, receive: Receive, send: Send, limit: int) -> None:
        """Run the app with a ``receive`` that counts the body and times it out."""
        timeout = self.limits.body_timeout_s
        deadline = asyncio.get_running_loop().time() + timeout
        received = 0
        complete = False
        started = False

        async def receive_limited() -> Message:
            nonlocal received, complete
            if complete:  # after the body, the app waits for a disconnect: no deadline
                return await receive()
            try:
                async with asyncio.timeout_at(deadline):
                    message = await receive()
            except TimeoutError:
                raise BodyRejected(
                    408, f"Request body not received within {timeout:g} seconds"
                ) from None
            if message["type"] != "http.request":
                complete = True
                return message
            received += len(message.get("body", b""))
            if received > limit:
                raise BodyRejected(413, _too_large(limit))
            complete = not message.get("more_body", False)
            return message

        async def send_watched(message: Message) -> None:
            nonlocal started
            started = True
            await send(message)

        try:
            await self.app(scope, receive_limited, send_watched)
        except BodyRejected as rejected:
            # Endpoints answer it themselves; this is for code that read the body elsewhere.
            if started:
                raise
            await send_reason(send, rejected.status_code, rejected.detail, _CLOSE)

    def _rule_for(self, scope: Scope) -> _BodyRule:
        """The rule of the route the request is for; the default when none takes it."""
        path = _route_path(scope)
        method = scope["method"]
        for prefix, pattern, methods, rule in self._index():
            # The static prefix first: a report's route is found in microseconds, not tens.
            if path.startswith(prefix) and method in methods and pattern.match(path):
                return rule
        # No route: nothing will read the body, which is bounded all the same.
        return self._default

    def _index(self) -> list[_IndexEntry]:
        if self._routes_index is None:
            self._routes_index = [
                (
                    route.path.split("{", 1)[0],
                    route.path_regex,
                    frozenset(route.methods or ()),
                    self._body_rule(route),
                )
                for route in self.routes()
                if isinstance(route, APIRoute)
            ]
        return self._routes_index

    def _body_rule(self, route: APIRoute) -> _BodyRule:
        documented = (route.openapi_extra or {}).get("requestBody")
        return _BodyRule(
            limit=self.limits.large_bodies.get(route.name, self.limits.max_body_bytes),
            takes_json=route.body_field is not None or documented is not None,
            # A route that takes no body leaves the 403 to its endpoint: a body sent to it is
            # never read anyway.
            superusers_only=route.body_field is not None and requires_superuser(route),
        )


def _route_path(scope: Scope) -> str:
    """The path the routes match: without the root path an ASGI server may put in front."""
    path: str = scope["path"]
    root: str = scope.get("root_path", "")
    if root and path.startswith(root + "/"):
        return path[len(root) :]
    return path


def _refusal(
    rule: _BodyRule, principal: Principal | None, length: int | None, content_type: bytes
) -> AppError | None:
    """Why a request with a body is refused before its body is read, if it is."""
    if rule.superusers_only and principal is not None and not principal.is_superuser:
        return SuperusersOnly()
    if length is not None and length > rule.limit:
        return PayloadTooLarge(_too_large(rule.limit))
    if rule.takes_json and not is_json(content_type):
        sent = f"not {content_type.decode('latin-1')}" if content_type else "none was given"
        return UnsupportedMediaType(
            f"Request body must be JSON, with Content-Type application/json ({sent})"
        )
    return None


def is_json(content_type: bytes) -> bool:
    """``application/json`` or ``application/<anything>+json``, with any parameters."""
    media = content_type.split(b";", 1)[0].strip().lower()
    return media == b"application/json" or (
        media.startswith(b"application/") and media.endswith(b"+json")
    )


def _too_large(limit: int) -> str:
    return f"Request body too large: at most {limit} bytes"


def _content_length(value: bytes) -> int | None:
    # uvicorn refuses a malformed Content-Length before the app sees it; None is "unknown".
    try:
        return int(value)
    except ValueError:
        return None
